//! `letus demo` as a newcomer runs it: its output piped into `head -1`, on a busy port, with `--blocks N`; it must
//! never panic, its URLs must answer while it runs, and its temporary store must be gone however it ends.

mod common;

use common::agent;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn demo(tmp: &std::path::Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_letus"));
    c.arg("demo")
        .args([
            "--accounts",
            "50",
            "--transfers",
            "10",
            "--interval-ms",
            "20",
        ])
        .args(args)
        .env("TMPDIR", tmp)
        .env("RUST_LOG", "warn");
    c
}

fn wait(child: &mut std::process::Child) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the demo did not exit"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn leftovers(tmp: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(tmp)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn demo_into_a_closed_pipe_exits_cleanly_and_removes_its_store() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = demo(tmp.path(), &["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // `| head -1`: read one line, then close the pipe.
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert!(
        first.starts_with("letus demo: a node on http://"),
        "{first}"
    );
    let status = wait(&mut child);
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert!(status.success(), "{status:?}: {err}");
    assert_eq!(
        leftovers(tmp.path()),
        Vec::<String>::new(),
        "the temporary store is removed"
    );
}

#[test]
fn demo_on_a_busy_port_fails_and_removes_its_store() {
    let tmp = tempfile::tempdir().unwrap();
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = busy.local_addr().unwrap().to_string();
    let out = demo(tmp.path(), &["--listen", &addr]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("cannot listen on"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

#[test]
fn demo_with_blocks_keeps_serving_its_urls_until_stopped() {
    let tmp = tempfile::tempdir().unwrap();
    let mut child = demo(tmp.path(), &["--listen", "127.0.0.1:0", "--blocks", "3"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let base = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap()
        .trim_end_matches('/')
        .to_string();
    let mut urls = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        urls.extend(
            line.split_whitespace()
                .filter(|w| w.starts_with("http://"))
                .map(String::from),
        );
        if line.starts_with("fed 3 blocks") {
            break;
        }
    }
    // Every URL it printed answers 200, the first (the node itself) included.
    assert!(urls.len() >= 5, "{urls:?}");
    let printed = urls.clone();
    for u in std::iter::once(format!("{base}/")).chain(urls) {
        let res = agent().get(&u).call().unwrap();
        assert_eq!(res.status(), 200, "{u}");
    }
    // Built from a clone with the JS package built (scripts/demo.sh, or CI, which sets LETUS_REQUIRE_WALLET), the
    // demo serves the wallet page and what it loads, whatever the current directory (here: letus-node/).
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let built = repo.join("js/pkg/letus_wasm.js").is_file();
    assert!(
        built || std::env::var_os("LETUS_REQUIRE_WALLET").is_none(),
        "LETUS_REQUIRE_WALLET is set but js/pkg is not built"
    );
    if built {
        assert!(
            printed.iter().any(|u| u.ends_with("/wallet/index.html")),
            "{printed:?}"
        );
        for path in [
            "/wallet/index.html",
            "/wallet/wallet.js",
            "/js/src/index.js",
            "/js/pkg/letus_wasm.js",
            "/js/pkg/letus_wasm_bg.wasm",
        ] {
            let res = agent().get(format!("{base}{path}")).call().unwrap();
            assert_eq!(res.status(), 200, "{path}");
        }
    }
    let mut res = agent().get(format!("{base}/v1/digest")).call().unwrap();
    let d: serde_json::Value = res.body_mut().read_json().unwrap();
    assert_eq!(d["version"], 3);
    assert!(child.try_wait().unwrap().is_none(), "still serving");
    Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(wait(&mut child).success());
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}

#[test]
fn demo_with_blocks_and_exit_stops_by_itself() {
    let tmp = tempfile::tempdir().unwrap();
    let out = demo(
        tmp.path(),
        &["--listen", "127.0.0.1:0", "--blocks", "2", "--exit"],
    )
    .output()
    .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("block     2"), "{stdout}");
    assert_eq!(leftovers(tmp.path()), Vec::<String>::new());
}
