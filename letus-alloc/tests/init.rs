//! `init` turns transparent huge pages off for the process (its own test binary: the flag is process-wide).

#[cfg(target_os = "linux")]
#[test]
fn init_turns_transparent_huge_pages_off() {
    if std::env::var_os("MIMALLOC_ALLOW_THP").is_some() {
        return; // the environment asked to keep THP as the kernel has it
    }
    // SAFETY: PR_GET_THP_DISABLE takes no pointer and only reads a flag of this process.
    let before = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
    if before == 1 {
        return; // inherited from the parent process: nothing left to observe
    }
    assert_eq!(before, 0, "PR_GET_THP_DISABLE failed");
    letus_alloc::init();
    let after = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
    assert_eq!(after, 1, "init left THP on");
}
