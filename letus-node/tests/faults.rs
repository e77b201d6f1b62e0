//! A node on a failing disk (the storage seam's fault injector, `letus_core::storage::faulty`, under both the
//! state and the block store): a full disk, a failed write or fsync, a power cut at a countdown of operations.
//! Every failed block write answers `503 unavailable` with the reason and is not acknowledged; once the device
//! works again the next write reopens the store by itself (no restart) and the chain goes on; after a power cut
//! the node reopens with every acknowledged block. In every case the digests of every version are those of a
//! node that never failed, and a block acknowledged is a block that can be read back.

use letus_core::storage::faulty::{Fault, Faulty};
use letus_core::storage::{local, SharedStorage};
use letus_core::Options;
use letus_node::api::{BlockRequest, DigestsResponse, WriteOp};
use letus_node::error::ApiError;
use letus_node::node::{Node, NodeLimits};

const BLOCKS: u64 = 10;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn request(v: u64) -> BlockRequest {
    let mut writes: Vec<WriteOp> = (0..8)
        .map(|i| WriteOp {
            tid: (i % 2) as u32,
            key: hex(format!("acct-{}", v * 8 + i).as_bytes()),
            value: Some(hex(format!("{v}:{i}").as_bytes())),
        })
        .collect();
    if v > 1 {
        writes.push(WriteOp {
            tid: 0,
            key: hex(format!("acct-{}", (v - 1) * 8).as_bytes()),
            value: None,
        });
    }
    BlockRequest {
        version: v,
        writes,
        block: Some(hex(format!("raw block {v}").as_bytes())),
        access_list: Vec::new(),
    }
}

fn open(dir: &std::path::Path, storage: SharedStorage) -> Result<Node, letus_core::Error> {
    let opts = Options {
        storage,
        memtable_bytes: 8 * 1024,
        vdls_file_bytes: 8 * 1024,
        memory_budget_bytes: 256 * 1024,
        read_threads: 2,
        ..Options::default()
    };
    Node::open(dir, opts, "t".into(), NodeLimits::default())
}

fn reference() -> Vec<DigestsResponse> {
    let dir = tempfile::tempdir().unwrap();
    let node = open(dir.path(), local()).unwrap();
    (1..=BLOCKS)
        .map(|v| node.write_block(request(v)).unwrap())
        .collect()
}

/// Writes blocks from the node's next version on; on a failure checks its answer and returns.
fn write_until_failure(node: &Node, acked: &mut u64, schedule: u64) -> bool {
    let from = node.digests(None).map_or(1, |d| d.version + 1);
    for v in from..=BLOCKS {
        match node.write_block(request(v)) {
            Ok(_) => *acked = v,
            Err(ApiError::Unavailable(why)) => {
                assert!(!why.is_empty(), "schedule {schedule}");
                return false;
            }
            Err(e) => panic!("schedule {schedule}: version {v}: {e:?} is not `unavailable`"),
        }
    }
    true
}

fn check(node: &Node, reference: &[DigestsResponse], acked: u64, schedule: u64) -> u64 {
    let latest = node.digests(None).map_or(0, |d| d.version);
    assert!(
        latest >= acked,
        "schedule {schedule}: acknowledged {acked}, the node is at {latest}"
    );
    for v in 1..=latest {
        assert_eq!(
            node.digests(Some(v)).unwrap(),
            reference[v as usize - 1],
            "schedule {schedule}: version {v}"
        );
        let b = node.block(v).unwrap();
        assert_eq!(b.version, v, "schedule {schedule}");
    }
    latest
}

#[test]
fn a_node_on_a_failing_disk_answers_unavailable_and_resumes_by_itself() {
    let reference = reference();
    let calib = {
        let dir = tempfile::tempdir().unwrap();
        let fs = Faulty::new(local(), 0);
        let node = open(dir.path(), fs.shared()).unwrap();
        let mut acked = 0;
        assert!(write_until_failure(&node, &mut acked, 0));
        fs.counts()
    };
    let schedules: u64 = std::env::var("LETUS_NODE_FAULT_SCHEDULES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(240);
    let kinds = [
        Fault::NoSpace,
        Fault::WriteError,
        Fault::SyncError,
        Fault::PowerCut,
    ];
    let (mut failed, mut resumed_in_place) = (0, 0);
    for n in 0..schedules {
        let fault = kinds[(n % kinds.len() as u64) as usize];
        let countdown = (n * 7919 + 13) % calib.of(fault).max(1);
        let dir = tempfile::tempdir().unwrap();
        let fs = Faulty::new(local(), n);
        let mut acked = 0;
        fs.arm(fault, countdown);
        let node = match open(dir.path(), fs.shared()) {
            Ok(node) => Some(node),
            Err(e) => {
                assert!(!e.to_string().is_empty());
                None
            }
        };
        let node = match node {
            Some(node) if write_until_failure(&node, &mut acked, n) => {
                // The fault fell after the last block (or in a read nothing needed).
                check(&node, &reference, acked, n);
                continue;
            }
            Some(node) => {
                failed += 1;
                if fault == Fault::PowerCut {
                    // The device is gone until power returns: every write is refused, none is acknowledged.
                    assert!(node.write_block(request(acked + 1)).is_err());
                    drop(node);
                    fs.crash().unwrap();
                    open(dir.path(), fs.shared()).unwrap_or_else(|e| panic!("schedule {n}: {e}"))
                } else {
                    if fault == Fault::NoSpace {
                        // Still full: refused again, with the reason.
                        assert!(matches!(
                            node.write_block(request(acked + 1)),
                            Err(ApiError::Unavailable(_)) | Ok(_)
                        ));
                    }
                    // Space returns: the same node takes the next block.
                    fs.heal();
                    resumed_in_place += 1;
                    node
                }
            }
            None => {
                failed += 1;
                if fault == Fault::PowerCut {
                    fs.crash().unwrap();
                } else {
                    fs.heal();
                }
                open(dir.path(), fs.shared()).unwrap_or_else(|e| panic!("schedule {n}: {e}"))
            }
        };
        check(&node, &reference, acked, n);
        assert!(
            write_until_failure(&node, &mut acked, n),
            "schedule {n} ({fault:?} after {countdown}): writes do not resume"
        );
        check(&node, &reference, BLOCKS, n);
        node.close().unwrap();
        let node = open(dir.path(), fs.shared()).unwrap();
        check(&node, &reference, BLOCKS, n);
    }
    println!("{schedules} schedules: {failed} met their fault, {resumed_in_place} resumed without a restart");
    assert!(
        failed * 10 >= schedules * 6,
        "only {failed} of {schedules} schedules met their fault"
    );
}
