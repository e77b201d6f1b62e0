//! Client subcommands for an operator's shell: `letus get`, `letus proof`, `letus digest`. Every answer is
//! verified with letus-verify before it is printed; a failed verification exits non-zero.

use std::process::ExitCode;

use letus_node::api::{DigestsResponse, MultiProofRequest, MultiProofResponse, ValueResponse};
use letus_verify::hex::decode as unhex;
use letus_verify::{verify_multi_proof, verify_proof, Claim, DigestChecker, Hash, Limits, Proof};

fn fetch<T: serde::de::DeserializeOwned>(
    req: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<T, String> {
    let mut res = req.map_err(|e| format!("request failed: {e}"))?;
    let status = res.status();
    let text = res.body_mut().read_to_string().map_err(|e| e.to_string())?;
    if !status.is_success() {
        return Err(format!("node answered {status}: {text}"));
    }
    serde_json::from_str(&text).map_err(|e| format!("unexpected answer: {e}"))
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

/// `letus get`.
#[derive(clap::Args)]
pub struct GetArgs {
    /// Node URL.
    #[arg(long, default_value = "http://127.0.0.1:7878")]
    url: String,
    /// Trie id.
    #[arg(long, default_value_t = 0)]
    tid: u32,
    /// Key (hex).
    #[arg(long)]
    key: String,
    /// Version (default: latest).
    #[arg(long)]
    version: Option<u64>,
    /// A root you trust for that version; without it the proof is checked against the node's own digest.
    #[arg(long)]
    root: Option<String>,
}

pub fn get(a: GetArgs) -> Result<ExitCode, String> {
    let mut url = format!(
        "{}/v1/tries/{}/keys/{}",
        a.url.trim_end_matches('/'),
        a.tid,
        a.key
    );
    if let Some(v) = a.version {
        url.push_str(&format!("?version={v}"));
    }
    let r: ValueResponse = fetch(agent().get(&url).call())?;
    let trusted = match &a.root {
        Some(h) => Hash::from_hex(h).ok_or("--root is not 64 hex digits")?,
        None => r.digest.root,
    };
    let key = unhex(&r.key).ok_or("bad key in answer")?;
    let value = r
        .value
        .as_deref()
        .map(|v| unhex(v).ok_or("bad value in answer"))
        .transpose()?;
    let proof = Proof::decode(
        &unhex(&r.proof_hex).ok_or("bad proof hex")?,
        &Limits::default(),
    )
    .map_err(|e| e.to_string())?;
    let verdict = verify_proof(&trusted, &key, value.as_deref(), &proof, &Limits::default());
    println!(
        "{}",
        serde_json::json!({"tid": r.tid, "version": r.version, "key": r.key, "value": r.value, "root": trusted.to_hex(),
            "proof_bytes": proof.encoded_len(), "verified": verdict.is_ok(), "error": verdict.as_ref().err().map(|e| e.code())})
    );
    Ok(if verdict.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `letus proof`.
#[derive(clap::Args)]
pub struct ProofArgs {
    /// Node URL.
    #[arg(long, default_value = "http://127.0.0.1:7878")]
    url: String,
    /// Trie id.
    #[arg(long, default_value_t = 0)]
    tid: u32,
    /// Keys (hex), one or more.
    #[arg(long = "key", required = true)]
    keys: Vec<String>,
    /// Version (default: latest).
    #[arg(long)]
    version: Option<u64>,
    /// A root you trust for that version; without it the proof is checked against the node's own digest.
    #[arg(long)]
    root: Option<String>,
}

pub fn proof(a: ProofArgs) -> Result<ExitCode, String> {
    let url = format!("{}/v1/tries/{}/proofs", a.url.trim_end_matches('/'), a.tid);
    let body = serde_json::to_string(&MultiProofRequest {
        keys: a.keys,
        version: a.version,
    })
    .map_err(|e| e.to_string())?;
    let r: MultiProofResponse = fetch(
        agent()
            .post(&url)
            .header("content-type", "application/json")
            .send(body.as_bytes()),
    )?;
    let keys: Vec<Vec<u8>> = r
        .keys
        .iter()
        .map(|k| unhex(k).ok_or("bad key"))
        .collect::<Result<_, _>>()?;
    let values: Vec<Option<Vec<u8>>> = r
        .values
        .iter()
        .map(|v| {
            v.as_deref()
                .map(|v| unhex(v).ok_or("bad value"))
                .transpose()
        })
        .collect::<Result<_, _>>()?;
    let claims = Claim::zip(&keys, &values);
    let proof = Proof::decode(
        &unhex(&r.proof_hex).ok_or("bad proof hex")?,
        &Limits::default(),
    )
    .map_err(|e| e.to_string())?;
    let trusted = match &a.root {
        Some(h) => Hash::from_hex(h).ok_or("--root is not 64 hex digits")?,
        None => r.digest.root,
    };
    let verdict = verify_multi_proof(&trusted, &claims, &proof, &Limits::default());
    println!(
        "{}",
        serde_json::json!({"tid": r.tid, "version": r.version, "keys": r.keys, "values": r.values, "proof_hex": r.proof_hex,
            "proof_bytes": proof.encoded_len(), "root": trusted.to_hex(), "verified": verdict.is_ok(), "error": verdict.as_ref().err().map(|e| e.code())})
    );
    Ok(if verdict.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `letus digest`.
#[derive(clap::Args)]
pub struct DigestArgs {
    /// Node URLs; with several, their digests are compared (fork and rollback detection).
    #[arg(long = "url", default_value = "http://127.0.0.1:7878")]
    urls: Vec<String>,
    /// Version (default: latest).
    #[arg(long)]
    version: Option<u64>,
}

pub fn digest(a: DigestArgs) -> Result<ExitCode, String> {
    let mut checker = DigestChecker::new();
    let mut alarm = false;
    for url in &a.urls {
        let path = match a.version {
            Some(v) => format!("{}/v1/digest/{v}", url.trim_end_matches('/')),
            None => format!("{}/v1/digest", url.trim_end_matches('/')),
        };
        let r: DigestsResponse = fetch(agent().get(&path).call())?;
        for d in &r.digests {
            let report = checker.observe(url, d);
            alarm |= report.is_alarm();
            println!(
                "{}",
                serde_json::json!({"source": url, "digest": d, "report": report.code()})
            );
        }
    }
    Ok(if alarm {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}
