//! The tiered storage without an object store: the warm tier is a second local directory, so the moves, the
//! handles that follow them and the recovery of an interrupted move run on real files here. The cold tier is
//! tested against a real S3 server in `tests/tiering.rs`.

use super::*;

fn cfg(root: &Path, warm: &Path) -> TierConfig {
    TierConfig {
        warm_dir: Some(warm.to_path_buf()),
        policy: TierPolicy {
            warm_after_versions: Some(1),
            scan_every_versions: 1,
            ..TierPolicy::default()
        },
        ..TierConfig::new(root)
    }
}

fn write(t: &Tiered, path: &Path, bytes: &[u8]) -> FileRef {
    t.create_dir_all(path.parent().unwrap()).unwrap();
    let f = t.open(path, OpenMode::CreateNew).unwrap();
    f.write_all_at(bytes, 0).unwrap();
    f.sync_data().unwrap();
    f
}

/// A tiered store holding `lsvps/000001.idx` ("one") and `lsvps/000002.idx` ("two"), both seen sealed at version 1.
fn two_index_files_seen_sealed(root: &Path, warm: &Path) -> (Tiered, PathBuf) {
    let t = Tiered::open(cfg(root, warm)).unwrap();
    let dir = root.join("lsvps");
    drop(write(&t, &dir.join("000001.idx"), b"one"));
    drop(write(&t, &dir.join("000002.idx"), b"two"));
    t.note_version(1);
    t.migrate_now().unwrap();
    (t, dir)
}

#[test]
fn names_say_what_is_tiered() {
    assert_eq!(kind_of("000001.idx"), Some((Kind::Index, 1)));
    assert_eq!(kind_of("000001.1.idx"), Some((Kind::Index, 1)));
    assert_eq!(kind_of("000001.1.idx.tmp"), None);
    assert_eq!(kind_of("000012.vdl"), Some((Kind::Numbered, 12)));
    assert_eq!(kind_of("1000000.seg"), Some((Kind::Numbered, 1_000_000)));
    for n in [
        "000001.idx.tmp",
        "roots.log",
        "LOCK",
        ".idx",
        "a1.idx",
        "000001.0.idx",
        "000001..idx",
        "000001.1a.idx",
        "tiers.manifest",
    ] {
        assert_eq!(kind_of(n), None, "{n}");
    }
}

#[test]
fn a_moved_file_is_read_through_handles_opened_before_the_move_and_only_the_active_file_stays() {
    let (root, warm) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let t = Tiered::open(cfg(root.path(), warm.path())).unwrap();
    let dir = root.path().join("vdls");
    let a = write(&t, &dir.join("000001.vdl"), b"first file");
    let b = write(&t, &dir.join("000002.vdl"), b"second, active");
    t.note_version(1);
    assert_eq!(
        t.migrate_now().unwrap(),
        0,
        "seen sealed at 1: its age counts from 2"
    );
    t.note_version(2);
    assert_eq!(
        t.migrate_now().unwrap(),
        0,
        "never in the version it may have been sealed in"
    );
    t.note_version(3);
    assert_eq!(t.migrate_now().unwrap(), 1, "only the sealed file moves");
    assert!(!dir.join("000001.vdl").exists(), "the hot copy is gone");
    assert!(warm.path().join("vdls/000001.vdl").exists());
    let mut buf = [0u8; 4];
    a.read_exact_at(&mut buf, 6).unwrap();
    assert_eq!(&buf, b"file");
    assert_eq!(a.size().unwrap(), 10);
    assert!(a.write_all_at(b"x", 0).is_err(), "a moved file is sealed");
    b.write_all_at(b"!", 14).unwrap();
    let mut names = t.list(&dir).unwrap();
    names.sort();
    assert_eq!(
        names,
        vec![OsString::from("000001.vdl"), OsString::from("000002.vdl")]
    );
    assert_eq!(
        t.kind(&dir.join("000001.vdl")).unwrap(),
        Some(EntryKind::File)
    );
    // A new handle, after a reopen, reads the warm copy.
    drop((a, b));
    drop(t);
    let t = Tiered::open(cfg(root.path(), warm.path())).unwrap();
    let f = t.open(&dir.join("000001.vdl"), OpenMode::Read).unwrap();
    let mut buf = [0u8; 10];
    f.read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"first file");
    let st = t.status();
    assert_eq!((st.tiers[1].files, st.tiers[1].bytes), (1, 10));
}

#[test]
fn an_interrupted_move_leaves_each_file_in_the_one_place_the_manifest_names() {
    let (root, warm) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (t, dir) = two_index_files_seen_sealed(root.path(), warm.path());
    t.note_version(3);
    assert_eq!(t.migrate_now().unwrap(), 2);
    drop(t);
    // Crash after the switch, before the delete: the hot copy came back.
    std::fs::write(dir.join("000001.idx"), b"one").unwrap();
    // Crash before the switch: a copy (and a temporary) the manifest does not name.
    std::fs::write(warm.path().join("lsvps/000009.idx"), b"orphan").unwrap();
    std::fs::write(warm.path().join("lsvps/000009.idx.tmp"), b"orph").unwrap();
    let t = Tiered::open(cfg(root.path(), warm.path())).unwrap();
    assert!(!dir.join("000001.idx").exists());
    assert!(!warm.path().join("lsvps/000009.idx").exists());
    assert!(!warm.path().join("lsvps/000009.idx.tmp").exists());
    assert_eq!(t.read(&dir.join("000001.idx")).unwrap(), b"one");
    assert_eq!(t.read(&dir.join("000002.idx")).unwrap(), b"two");
    // Removing a warm file removes it there and from the manifest.
    t.remove_file(&dir.join("000002.idx")).unwrap();
    assert!(!warm.path().join("lsvps/000002.idx").exists());
    assert_eq!(t.kind(&dir.join("000002.idx")).unwrap(), None);
}

#[test]
fn a_file_that_becomes_the_active_one_again_is_never_moved() {
    let (root, warm) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let t = Tiered::open(cfg(root.path(), warm.path())).unwrap();
    let dir = root.path().join("vdls");
    let first = write(&t, &dir.join("000001.vdl"), b"first");
    drop(write(&t, &dir.join("000002.vdl"), b"next"));
    t.note_version(1);
    t.migrate_now().unwrap();
    assert_eq!(t.inner.lock_manifest().files.len(), 1, "000001 is sealed");
    // Recovery removes the newer file that no commit used; the value log writes 000001 again.
    t.remove_file(&dir.join("000002.vdl")).unwrap();
    t.note_version(5);
    assert_eq!(t.migrate_now().unwrap(), 0);
    assert!(t.inner.lock_manifest().files.is_empty());
    first.write_all_at(b"!", 5).unwrap();
    assert!(dir.join("000001.vdl").exists());
}

#[test]
fn a_second_instance_on_the_same_root_is_refused_before_it_touches_anything() {
    let (root, warm) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let t = Tiered::open(cfg(root.path(), warm.path())).unwrap();
    let dir = root.path().join("lsvps");
    drop(write(&t, &dir.join("000001.idx"), b"one"));
    t.note_version(1);
    t.migrate_now().unwrap();
    t.note_version(3);
    assert_eq!(t.migrate_now().unwrap(), 1);
    assert!(matches!(
        Tiered::open(cfg(root.path(), warm.path())),
        Err(Error::Locked(_))
    ));
    assert!(warm.path().join("lsvps/000001.idx").exists());
    drop(t);
    assert!(Tiered::open(cfg(root.path(), warm.path())).is_ok());
}

#[test]
fn a_warm_directory_overlapping_the_store_is_refused_and_foreign_files_in_it_are_left_alone() {
    let (root, warm) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    assert!(Tiered::open(cfg(root.path(), root.path())).is_err());
    assert!(Tiered::open(cfg(root.path(), &root.path().join("warm"))).is_err());
    assert!(Tiered::open(cfg(&warm.path().join("data"), warm.path())).is_err());
    std::fs::create_dir_all(warm.path().join("lost+found")).unwrap();
    std::fs::write(warm.path().join("lost+found/#1234"), b"not ours").unwrap();
    std::fs::write(warm.path().join("notes.txt"), b"not ours").unwrap();
    drop(Tiered::open(cfg(root.path(), warm.path())).unwrap());
    assert!(warm.path().join("lost+found/#1234").exists());
    assert!(warm.path().join("notes.txt").exists());
}

#[test]
fn a_record_of_a_file_that_is_gone_does_not_block_the_moves_behind_it() {
    let (root, warm) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let t = Tiered::open(cfg(root.path(), warm.path())).unwrap();
    let dir = root.path().join("lsvps");
    drop(write(&t, &dir.join("000001.idx"), b"one"));
    t.note_version(1);
    t.migrate_now().unwrap();
    // Removed behind the manifest's back (a crash between the engine's remove and the manifest update).
    std::fs::remove_file(dir.join("000001.idx")).unwrap();
    drop(write(&t, &dir.join("000002.idx"), b"two"));
    t.note_version(2);
    t.migrate_now().unwrap();
    t.note_version(5);
    assert_eq!(t.migrate_now().unwrap(), 1);
    assert!(warm.path().join("lsvps/000002.idx").exists());
    assert!(!t
        .inner
        .lock_manifest()
        .files
        .contains_key("lsvps/000001.idx"));
}

#[test]
fn open_forgets_a_hot_record_whose_file_is_gone() {
    let (root, warm) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (t, dir) = two_index_files_seen_sealed(root.path(), warm.path());
    assert_eq!(t.inner.lock_manifest().files.len(), 2);
    drop(t);
    // A crash between the engine's removal of a hot file (a consolidated generation replaced it) and the
    // manifest's update.
    std::fs::remove_file(dir.join("000001.idx")).unwrap();
    let t = Tiered::open(cfg(root.path(), warm.path())).unwrap();
    let files = t.inner.lock_manifest().files.clone();
    assert!(!files.contains_key("lsvps/000001.idx"), "{files:?}");
    assert!(files.contains_key("lsvps/000002.idx"));
    drop(t);
    // And durably so: the record does not come back at the next open.
    let m = Manifest::load(&crate::storage::Local, root.path()).unwrap();
    assert!(!m.files.contains_key("lsvps/000001.idx"));
}

/// Waits (at most 20 s: a liveness bound, not a timing) until `lsvps/<name>` is recorded; returns its record.
fn recorded(t: &Tiered, name: &str) -> Option<FileRecord> {
    let rel = format!("lsvps/{name}");
    for _ in 0..2_000 {
        if let Some(f) = t.inner.lock_manifest().files.get(&rel) {
            return Some(f.clone());
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    None
}

#[test]
fn a_file_sealed_while_a_move_runs_is_recorded_at_once_and_ages_from_then() {
    let (root, warm) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let t = Tiered::open(TierConfig {
        warm_dir: Some(warm.path().to_path_buf()),
        policy: TierPolicy {
            warm_after_versions: Some(50),
            scan_every_versions: 1,
            ..TierPolicy::default()
        },
        ..TierConfig::new(root.path())
    })
    .unwrap();
    t.start_mover();
    let dir = root.path().join("lsvps");
    drop(write(&t, &dir.join("000001.idx"), b"one"));
    t.note_version(3);
    assert_eq!(recorded(&t, "000001.idx").map(|f| f.sealed_at), Some(4));
    // A long move holds `moving` (as a consolidation and upload do for hundreds of versions): no pass can run.
    let pass = t.inner.lock_moving();
    drop(write(&t, &dir.join("000002.idx"), b"two"));
    t.note_version(10);
    let f = recorded(&t, "000002.idx").expect("recorded while the move runs");
    assert_eq!((f.sealed_at, f.tier), (11, Tier::Hot));
    drop(pass);
    t.stop_mover();
}

/// Found by review: a pass held the move lock from its first file to its last (up to a GiB of copies and
/// uploads), and the engine's removal of a moved file waited for all of it (a block-store tail cut, under the
/// node's locks, stalled every write). Between two moves a pass holds it no longer; a removal of a moved file then
/// goes through, and one of a file the manifest no longer names is done.
#[test]
fn a_pass_lets_go_of_the_move_lock_between_files() {
    let (root, warm) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (t, dir) = two_index_files_seen_sealed(root.path(), warm.path());
    let free: Arc<Mutex<Vec<bool>>> = Arc::default();
    let seen = free.clone();
    *t.inner.after_each_move.lock().unwrap() = Some(Box::new(move |inner: &Inner| {
        seen.lock().unwrap().push(inner.moving.try_lock().is_ok());
    }));
    t.note_version(3);
    assert_eq!(t.migrate_now().unwrap(), 2);
    assert_eq!(*free.lock().unwrap(), [true, true]);
    *t.inner.after_each_move.lock().unwrap() = None;
    t.remove_file(&dir.join("000001.idx")).unwrap();
    assert!(!warm.path().join("lsvps/000001.idx").exists());
    assert!(!t
        .inner
        .lock_manifest()
        .files
        .contains_key("lsvps/000001.idx"));
    t.inner.forget_moved("lsvps/000001.idx").unwrap();
    assert!(warm.path().join("lsvps/000002.idx").exists());
}
