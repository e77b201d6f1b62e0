//! Client subcommands for an operator's shell: `letus get`, `letus proof`, `letus digest`. Every answer is
//! verified with letus-verify before it is printed; a failed verification exits non-zero.
//!
//! What is verified is the claim the *user* asked about: the key(s), trie and version come from the command line,
//! never from the node's answer, and an answer for another key, trie, version or number of keys is refused
//! (`answer_mismatch`) before any proof is looked at. Without `--root` a proof can only be checked against the
//! node's own digest, which shows the answer is internally consistent and nothing more: the output says so
//! (`"trusted": false` and a `note`).
//!
//! Output: one JSON object per line, also on failure: `{"error": "<code>", "message": "…", "verified": false, …}`,
//! where the code is the node's error code (with its HTTP `status`) or one of `bad_argument`, `request_failed`,
//! `http_error`, `malformed`, `answer_mismatch`, or a SPEC.md decode/verification code.

use std::io::Write;
use std::process::ExitCode;

use letus_node::api::{
    DigestsResponse, ErrorBody, MultiProofRequest, MultiProofResponse, ValueRequest, ValueResponse,
};
use letus_verify::hex::{decode as unhex, encode as hex};
use letus_verify::proof_json::ProofJson;
use letus_verify::{
    verify_multi_proof, verify_proof, Claim, Digest, DigestChecker, Hash, Limits, Proof,
};
use serde_json::{json, Map, Value};

/// Printed (as `note`) whenever a proof was checked against the node's own digest instead of a trusted root.
pub const UNTRUSTED_NOTE: &str = "no --root given: the proof was checked only against the node's own digest, which shows \
the answer is internally consistent, not that it is the chain's state; pass --root with a root you trust";

/// Why a client command could not print a verified answer.
#[derive(Debug)]
enum Failure {
    /// A command-line argument is malformed.
    Argument(String),
    /// The node could not be reached, or the connection failed.
    Request(String),
    /// The node answered with an error status.
    Node {
        status: u16,
        code: String,
        message: String,
    },
    /// The answer is not the JSON the API documents.
    Malformed(String),
    /// A well-formed answer to another request: another key, trie, version or number of keys.
    Mismatch(String),
    /// The proof in the answer does not decode (a SPEC.md error code).
    Decode(letus_verify::DecodeError),
}

impl Failure {
    fn code(&self) -> String {
        match self {
            Failure::Argument(_) => "bad_argument".into(),
            Failure::Request(_) => "request_failed".into(),
            Failure::Node { code, .. } => code.clone(),
            Failure::Malformed(_) => "malformed".into(),
            Failure::Mismatch(_) => "answer_mismatch".into(),
            Failure::Decode(e) => e.code().into(),
        }
    }

    fn message(&self) -> String {
        match self {
            Failure::Argument(m) | Failure::Request(m) | Failure::Malformed(m) => m.clone(),
            Failure::Node {
                status, message, ..
            } => format!("the node answered {status}: {message}"),
            Failure::Mismatch(m) => format!("the node's answer does not match the request: {m}"),
            Failure::Decode(e) => format!("the proof does not decode: {e}"),
        }
    }

    /// The output line: the request's fields, then `error`, `message`, `verified: false` (and the node's status).
    fn line(&self, mut request: Map<String, Value>) -> Value {
        request.insert("error".into(), self.code().into());
        request.insert("message".into(), self.message().into());
        request.insert("verified".into(), false.into());
        if let Failure::Node { status, .. } = self {
            request.insert("status".into(), (*status).into());
        }
        Value::Object(request)
    }
}

/// Prints one JSON line; a closed stdout (`letus get … | head -0`) is not an error worth a panic.
fn print_line(v: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{v}").and_then(|()| out.flush());
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(std::time::Duration::from_secs(60)))
        .build()
        .into()
}

/// Reads an answer: a 2xx with the documented JSON, or the node's error (its code if it sent one).
fn fetch<T: serde::de::DeserializeOwned>(
    req: Result<ureq::http::Response<ureq::Body>, ureq::Error>,
) -> Result<T, Failure> {
    let mut res = req.map_err(|e| Failure::Request(format!("request failed: {e}")))?;
    let status = res.status();
    let text = res
        .body_mut()
        .with_config()
        // A 16 MiB value is 32 MiB of hex; a hostile node cannot make the client hold more than this.
        .limit(256 << 20)
        .read_to_string()
        .map_err(|e| Failure::Request(format!("reading the answer failed: {e}")))?;
    if !status.is_success() {
        return Err(match serde_json::from_str::<ErrorBody>(&text) {
            Ok(b) => Failure::Node {
                status: status.as_u16(),
                code: b.error.code,
                message: b.error.message,
            },
            Err(_) => Failure::Node {
                status: status.as_u16(),
                code: "http_error".into(),
                message: text.chars().take(200).collect(),
            },
        });
    }
    serde_json::from_str(&text)
        .map_err(|e| Failure::Malformed(format!("the answer is not the documented JSON: {e}")))
}

fn base(url: &str) -> &str {
    url.trim_end_matches('/')
}

fn arg_key(k: &str) -> Result<Vec<u8>, Failure> {
    unhex(k).ok_or_else(|| Failure::Argument(format!("--key `{k}` is not hex")))
}

fn arg_root(r: &Option<String>) -> Result<Option<Hash>, Failure> {
    r.as_deref()
        .map(|h| {
            Hash::from_hex(h)
                .ok_or_else(|| Failure::Argument(format!("--root `{h}` is not 64 hex digits")))
        })
        .transpose()
}

fn answer_hex(s: &str, what: &str) -> Result<Vec<u8>, Failure> {
    unhex(s).ok_or_else(|| Failure::Malformed(format!("`{what}` in the answer is not hex")))
}

fn ensure(cond: bool, what: impl FnOnce() -> String) -> Result<(), Failure> {
    if cond {
        Ok(())
    } else {
        Err(Failure::Mismatch(what()))
    }
}

/// The checks every proof-carrying answer gets: trie and version against the request, the digest against the
/// answer, and the JSON proof against the binary one; returns the decoded proof.
fn check_answer(
    asked_tid: u32,
    asked_version: Option<u64>,
    tid: u32,
    version: u64,
    digest: &Digest,
    proof_json: &ProofJson,
    proof_hex: &str,
) -> Result<Proof, Failure> {
    ensure(tid == asked_tid && digest.tid == asked_tid, || {
        format!(
            "asked for trie {asked_tid}, the answer is for trie {tid} (digest of trie {})",
            digest.tid
        )
    })?;
    if let Some(v) = asked_version {
        ensure(version == v, || {
            format!("asked for version {v}, the answer is for version {version}")
        })?;
    }
    ensure(digest.version == version, || {
        format!(
            "the answer is for version {version} but its digest for version {}",
            digest.version
        )
    })?;
    let limits = Limits::default();
    let proof =
        Proof::decode(&answer_hex(proof_hex, "proof_hex")?, &limits).map_err(Failure::Decode)?;
    let from_json = Proof::from_json(proof_json, &limits).map_err(Failure::Decode)?;
    ensure(from_json.encode() == proof.encode(), || {
        "`proof` and `proof_hex` are different proofs".into()
    })?;
    Ok(proof)
}

/// The trust fields of an output line: `trusted` and, without a trusted root, the `note` saying what that means.
fn trust_fields(m: &mut Map<String, Value>, trusted: bool) {
    m.insert("trusted".into(), trusted.into());
    if !trusted {
        m.insert("note".into(), UNTRUSTED_NOTE.into());
    }
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
    /// Key (hex; `--key ""` is the empty key).
    #[arg(long)]
    key: String,
    /// Version (default: latest).
    #[arg(long)]
    version: Option<u64>,
    /// A root you trust for that version; without it the proof is checked against the node's own digest.
    #[arg(long)]
    root: Option<String>,
}

/// Prints the verified answer's JSON line (exit status from whether it verified), or the failure's line naming the
/// request.
fn report(result: Result<(Value, bool), Failure>, request: Map<String, Value>) -> ExitCode {
    match result {
        Ok((line, ok)) => {
            print_line(&line);
            exit(ok)
        }
        Err(f) => {
            print_line(&f.line(request));
            ExitCode::FAILURE
        }
    }
}

pub fn get(a: GetArgs) -> Result<ExitCode, String> {
    let mut request = Map::new();
    request.insert("tid".into(), a.tid.into());
    request.insert("key".into(), a.key.to_ascii_lowercase().into());
    request.insert("version".into(), a.version.into());
    Ok(report(get_verified(&a), request))
}

fn get_verified(a: &GetArgs) -> Result<(Value, bool), Failure> {
    let key = arg_key(&a.key)?;
    let root = arg_root(&a.root)?;
    // The POST route takes any key, the empty one and keys too long for a URL included.
    let body = serde_json::to_string(&ValueRequest {
        key: hex(&key),
        version: a.version,
    })
    .map_err(|e| Failure::Argument(e.to_string()))?;
    let r: ValueResponse = fetch(
        agent()
            .post(format!("{}/v1/tries/{}/value", base(&a.url), a.tid))
            .header("content-type", "application/json")
            .send(body.as_bytes()),
    )?;
    ensure(r.key.eq_ignore_ascii_case(&hex(&key)), || {
        format!(
            "asked for key {}, the answer is for key {}",
            hex(&key),
            r.key
        )
    })?;
    let proof = check_answer(
        a.tid,
        a.version,
        r.tid,
        r.version,
        &r.digest,
        &r.proof,
        &r.proof_hex,
    )?;
    let value = r
        .value
        .as_deref()
        .map(|v| answer_hex(v, "value"))
        .transpose()?;
    let trusted = root.unwrap_or(r.digest.root);
    // The claim: the key the user asked for, with the value the node says it has.
    let verdict = verify_proof(&trusted, &key, value.as_deref(), &proof, &Limits::default());
    let mut m = Map::new();
    m.insert("tid".into(), a.tid.into());
    m.insert("version".into(), r.version.into());
    m.insert("key".into(), hex(&key).into());
    m.insert("value".into(), value.as_deref().map(hex).into());
    m.insert("root".into(), trusted.to_hex().into());
    m.insert("proof_bytes".into(), proof.encoded_len().into());
    Ok(finish_line(m, verdict.as_ref().err(), root.is_some()))
}

/// The verdict fields every verified answer line ends with (`verified`, `error`, `message`, and whether a trusted
/// root was given), and whether it verified.
fn finish_line(
    mut m: Map<String, Value>,
    failure: Option<&letus_verify::ProofError>,
    trusted: bool,
) -> (Value, bool) {
    m.insert("verified".into(), failure.is_none().into());
    m.insert("error".into(), failure.map(|e| e.code()).into());
    if let Some(e) = failure {
        m.insert("message".into(), e.to_string().into());
    }
    trust_fields(&mut m, trusted);
    (Value::Object(m), failure.is_none())
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
    let mut request = Map::new();
    request.insert("tid".into(), a.tid.into());
    request.insert(
        "keys".into(),
        a.keys
            .iter()
            .map(|k| k.to_ascii_lowercase())
            .collect::<Vec<_>>()
            .into(),
    );
    request.insert("version".into(), a.version.into());
    Ok(report(proof_verified(&a), request))
}

fn proof_verified(a: &ProofArgs) -> Result<(Value, bool), Failure> {
    let keys: Vec<Vec<u8>> = a
        .keys
        .iter()
        .map(|k| arg_key(k))
        .collect::<Result<_, _>>()?;
    let root = arg_root(&a.root)?;
    let asked: Vec<String> = keys.iter().map(|k| hex(k)).collect();
    let body = serde_json::to_string(&MultiProofRequest {
        keys: asked.clone(),
        version: a.version,
    })
    .map_err(|e| Failure::Argument(e.to_string()))?;
    let r: MultiProofResponse = fetch(
        agent()
            .post(format!("{}/v1/tries/{}/proofs", base(&a.url), a.tid))
            .header("content-type", "application/json")
            .send(body.as_bytes()),
    )?;
    ensure(
        r.keys.len() == keys.len() && r.values.len() == keys.len(),
        || {
            format!(
                "asked for {} keys, the answer has {} keys and {} values",
                keys.len(),
                r.keys.len(),
                r.values.len()
            )
        },
    )?;
    for (i, (got, want)) in r.keys.iter().zip(&asked).enumerate() {
        ensure(got.eq_ignore_ascii_case(want), || {
            format!("key {i}: asked for {want}, the answer is for {got}")
        })?;
    }
    let proof = check_answer(
        a.tid,
        a.version,
        r.tid,
        r.version,
        &r.digest,
        &r.proof,
        &r.proof_hex,
    )?;
    let values: Vec<Option<Vec<u8>>> = r
        .values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            v.as_deref()
                .map(|v| answer_hex(v, &format!("values[{i}]")))
                .transpose()
        })
        .collect::<Result<_, _>>()?;
    // The claims: the keys the user asked for, in their order, with the values the node says they have.
    let claims = Claim::zip(&keys, &values);
    let trusted = root.unwrap_or(r.digest.root);
    let verdict = verify_multi_proof(&trusted, &claims, &proof, &Limits::default());
    let mut m = Map::new();
    m.insert("tid".into(), a.tid.into());
    m.insert("version".into(), r.version.into());
    m.insert("keys".into(), asked.into());
    m.insert(
        "values".into(),
        values
            .iter()
            .map(|v| v.as_deref().map(hex))
            .collect::<Vec<_>>()
            .into(),
    );
    m.insert("proof_hex".into(), hex(&proof.encode()).into());
    m.insert("proof_bytes".into(), proof.encoded_len().into());
    m.insert("root".into(), trusted.to_hex().into());
    Ok(finish_line(m, verdict.as_ref().err(), root.is_some()))
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
    /// A digest you trust, as the JSON object `letus digest` prints in its `digest` field
    /// (`{"tid":…,"version":…,"root":…,"history_len":…,"history_root":…}`); repeatable. A node's digest that
    /// conflicts with one is reported as `checkpoint_conflict`.
    #[arg(long = "checkpoint", value_name = "DIGEST_JSON")]
    checkpoints: Vec<String>,
}

pub fn digest(a: DigestArgs) -> Result<ExitCode, String> {
    let mut checker = DigestChecker::new();
    let mut alarm = false;
    let mut failed = false;
    for (i, c) in a.checkpoints.iter().enumerate() {
        let parsed = serde_json::from_str::<Digest>(c)
            .map_err(|e| e.to_string())
            .and_then(|d| d.validate().map(|()| d).map_err(|e| e.to_string()));
        let d = match parsed {
            Ok(d) => d,
            Err(e) => {
                let f = Failure::Argument(format!("--checkpoint {i} is not a digest: {e}"));
                let mut m = Map::new();
                m.insert("source".into(), "checkpoint".into());
                print_line(&f.line(m));
                return Ok(ExitCode::FAILURE);
            }
        };
        let report = checker.add_checkpoint(&d);
        alarm |= report.is_alarm();
        print_line(&json!({"source": "checkpoint", "digest": d, "report": report.code()}));
    }
    for url in &a.urls {
        match digests_of(url, a.version) {
            Ok(r) => {
                for d in &r.digests {
                    let report = checker.observe(url, d);
                    alarm |= report.is_alarm();
                    print_line(&json!({"source": url, "digest": d, "report": report.code()}));
                }
            }
            Err(f) => {
                failed = true;
                let mut m = Map::new();
                m.insert("source".into(), url.as_str().into());
                m.insert("version".into(), a.version.into());
                let mut line = f.line(m);
                if let Some(o) = line.as_object_mut() {
                    o.remove("verified");
                }
                print_line(&line);
            }
        }
    }
    Ok(exit(!alarm && !failed))
}

fn digests_of(url: &str, version: Option<u64>) -> Result<DigestsResponse, Failure> {
    let path = match version {
        Some(v) => format!("{}/v1/digest/{v}", base(url)),
        None => format!("{}/v1/digest", base(url)),
    };
    let r: DigestsResponse = fetch(agent().get(&path).call())?;
    if let Some(v) = version {
        ensure(r.version == v, || {
            format!(
                "asked for version {v}, the answer is for version {}",
                r.version
            )
        })?;
    }
    for d in &r.digests {
        d.validate()
            .map_err(|e| Failure::Malformed(format!("a digest in the answer: {e}")))?;
        ensure(d.version == r.version, || {
            format!(
                "the answer is for version {} but holds a digest of trie {} at version {}",
                r.version, d.tid, d.version
            )
        })?;
    }
    Ok(r)
}

fn exit(ok: bool) -> ExitCode {
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// `letus tier status`.
#[derive(clap::Args)]
pub struct TierArgs {
    #[command(subcommand)]
    what: TierCommand,
}

#[derive(clap::Subcommand)]
enum TierCommand {
    /// Where a store's sealed files are: from a running node (`--url`), or read from a data directory's
    /// manifest (`--data`, which works while the node runs or is stopped).
    Status {
        /// The node.
        #[arg(long, default_value = "http://127.0.0.1:7878", conflicts_with = "data")]
        url: String,
        /// A data directory instead of a node.
        #[arg(long)]
        data: Option<std::path::PathBuf>,
    },
}

pub fn tier(a: TierArgs) -> Result<ExitCode, String> {
    let TierCommand::Status { url, data } = a.what;
    let status: Value = match data {
        Some(dir) => {
            let m = letus_core::storage::tiered::Manifest::load(&letus_core::storage::Local, &dir)
                .map_err(|e| e.to_string())?;
            let mut tiers = serde_json::Map::new();
            for t in letus_core::storage::tiered::Tier::ALL {
                let (files, bytes) = m
                    .files
                    .values()
                    .filter(|f| f.tier == t)
                    .fold((0u64, 0u64), |(n, b), f| (n + 1, b + f.size));
                tiers.insert(
                    t.name().into(),
                    serde_json::json!({ "files": files, "bytes": bytes }),
                );
            }
            serde_json::json!({ "tiers": tiers, "object_store": { "epoch": m.epoch } })
        }
        None => fetch::<Value>(agent().get(format!("{}/v1/tiers", base(&url))).call())
            .map_err(|e| format!("{}: {}", e.code(), e.message()))?,
    };
    let t = &status["tiers"];
    let mut out = std::io::stdout().lock();
    for name in ["hot", "warm", "cold"] {
        let _ = writeln!(
            out,
            "{name:>5}: {:>8} files {:>16} bytes",
            t[name]["files"], t[name]["bytes"]
        );
    }
    let _ = writeln!(
        out,
        "{}",
        serde_json::to_string_pretty(&status).unwrap_or_default()
    );
    Ok(ExitCode::SUCCESS)
}
