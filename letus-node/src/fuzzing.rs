//! Entry points for the fuzz targets in `fuzz/` (not part of the node's API): the block store's segment files and
//! the JSON request bodies, fed arbitrary bytes. Each returns normally, with a value or a typed error; a panic, a
//! hang or an allocation beyond the input's size is a bug.

use std::path::Path;

use crate::api::{BlockRequest, HistoryRequest, MultiProofRequest, ValueRequest};
use crate::blockstore::{BlockStore, BlockStoreOptions};
use crate::node::Node;

/// `bytes` as segment 1 of a block store in `dir` (a path in memory, [`letus_core::storage::Memory`]): recovered,
/// then every version it claims read back.
pub fn block_segment(dir: &Path, bytes: &[u8]) -> Result<u64, letus_core::Error> {
    let fs = letus_core::storage::Memory::new();
    fs.put(&dir.join("000001.seg"), bytes);
    let s = BlockStore::open(
        dir,
        BlockStoreOptions {
            sync: false,
            storage: std::sync::Arc::new(fs),
            ..BlockStoreOptions::default()
        },
    )?;
    let mut n = 0;
    if let Some(latest) = s.latest_version() {
        for v in latest.saturating_sub(64)..=latest {
            if s.get(v)?.is_some() {
                n += 1;
            }
        }
    }
    Ok(n)
}

/// `bytes` as the body of `POST /v1/blocks` (with a valid token) and of the read routes that take a JSON body,
/// against `node`. JSON that does not parse is the router's 400; what parses goes through the node.
pub fn request_bodies(node: &Node, bytes: &[u8]) {
    if let Ok(req) = serde_json::from_slice::<BlockRequest>(bytes) {
        let _ = node.write_block(req);
    }
    if let Ok(req) = serde_json::from_slice::<ValueRequest>(bytes) {
        let _ = node.value(0, &req.key, req.version);
    }
    if let Ok(req) = serde_json::from_slice::<HistoryRequest>(bytes) {
        let _ = node.history(0, &req.key, req.proofs, req.limit, req.before);
    }
    if let Ok(req) = serde_json::from_slice::<MultiProofRequest>(bytes) {
        let _ = node.multi_proof(0, req);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Random bytes, and bit flips and truncations of a real segment and of real request bodies: no panic, and
    /// the node still answers afterwards.
    #[test]
    fn segments_and_bodies_take_garbage() {
        let mut rng = letus_workload::Rng::new(7);
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        {
            let mut s = BlockStore::open(&src, BlockStoreOptions::default()).unwrap();
            for v in 1..=20u64 {
                s.append(v, [v as u8; 32], &rng.bytes(100)).unwrap();
            }
        }
        let seg = std::fs::read(src.join("000001.seg")).unwrap();
        let node = Node::open(
            &dir.path().join("node"),
            letus_core::Options::default(),
            "t".into(),
            crate::node::NodeLimits::default(),
        )
        .unwrap();
        let bodies: Vec<Vec<u8>> = [
            r#"{"version":1,"writes":[{"tid":0,"key":"6b","value":"76"}],"block":"00"}"#,
            r#"{"key":"6b","version":1}"#,
            r#"{"key":"6b","proofs":true,"limit":3,"before":1}"#,
            r#"{"keys":["6b","6c"],"version":1}"#,
        ]
        .iter()
        .map(|b| b.as_bytes().to_vec())
        .collect();
        for round in 0..1_000u64 {
            let seed = if round % 2 == 0 {
                &seg
            } else {
                &bodies[(round / 2 % 4) as usize]
            };
            let mut b = seed.clone();
            for _ in 0..rng.below(3) {
                let at = rng.below(b.len() as u64) as usize;
                b[at] ^= 1 << rng.below(8);
            }
            if rng.below(4) == 0 {
                b.truncate(rng.below(b.len() as u64 + 1) as usize);
            }
            if round % 2 == 0 {
                let sub = dir.path().join(format!("s{round}"));
                std::fs::create_dir_all(&sub).unwrap();
                let _ = block_segment(&sub, &b);
                let _ = std::fs::remove_dir_all(&sub);
            } else {
                request_bodies(&node, &b);
            }
        }
        // The node still takes the next block and serves it.
        let next = node.digests(None).map_or(1, |d| d.version + 1);
        let req: BlockRequest = serde_json::from_str(&format!(
            r#"{{"version":{next},"writes":[{{"tid":0,"key":"6f6b","value":"7965"}}]}}"#
        ))
        .unwrap();
        node.write_block(req).unwrap();
        let v = node.value(0, "6f6b", None).unwrap();
        assert_eq!((v.version, v.value.as_deref()), (next, Some("7965")));
    }
}
