//! The raw client API on this machine's OpenPMIx. Without a server, `PMIx_Init` fails with a
//! status (OpenPMIx 4.2 makes no singleton here: `PMIX_ERR_UNREACH`) rather than crashing;
//! under Open MPI's `mpirun`, which hosts a PMIx server, two processes put, commit, fence and
//! read each other's values and the job's attributes. The test runs itself under `mpirun`
//! (skipped, with a note, where Open MPI's `mpirun.openmpi` is not installed).

use std::ffi::{CStr, CString};
use std::process::Command;
use std::ptr::{null, null_mut};

use pmix_sys::*;

/// Set in the processes `mpirun` starts, so that they run the body instead of launching.
const CHILD_VAR: &str = "PMIX_SYS_SMOKE_CHILD";

/// A proc of namespace `nspace` with rank `rank`.
fn proc_of(nspace: &pmix_nspace_t, rank: pmix_rank_t) -> pmix_proc_t {
    pmix_proc_t {
        nspace: *nspace,
        rank,
    }
}

fn ok(rc: pmix_status_t) {
    assert_eq!(rc, PMIX_SUCCESS as pmix_status_t, "{}", error_string(rc));
}

#[test]
fn without_a_server_init_fails_with_a_status() {
    if std::env::var_os(CHILD_VAR).is_some() {
        return;
    }
    let mut me = pmix_proc_t::default();
    // Environment a launcher may have left would make this a client of some other job.
    let vars: Vec<String> = std::env::vars()
        .map(|(k, _)| k)
        .filter(|k| k.starts_with("PMIX_"))
        .collect();
    for k in vars {
        std::env::remove_var(k);
    }
    // SAFETY: `me` is writable; no info array.
    let rc = unsafe { PMIx_Init(&mut me, null_mut(), 0) };
    if rc == PMIX_SUCCESS as pmix_status_t {
        // A PMIx that makes singletons (a system server, or a later version): finalize it.
        // SAFETY: initialized just above.
        ok(unsafe { PMIx_Finalize(null(), 0) });
    } else {
        assert!(rc < 0, "a failure is a negative status: {rc}");
        assert!(!error_string(rc).is_empty());
    }
}

#[test]
fn two_processes_under_mpirun_exchange_values_through_the_server() {
    if std::env::var_os(CHILD_VAR).is_some() {
        return child();
    }
    let test = "pmix-sys: two_processes_under_mpirun_exchange_values_through_the_server";
    if !testkit::skip::on_path("mpirun.openmpi", test, "apt-get install openmpi-bin") {
        return;
    }
    let out = Command::new("mpirun.openmpi")
        .args(["--allow-run-as-root", "--oversubscribe", "-n", "2"])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "two_processes_under_mpirun_exchange_values_through_the_server",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_VAR, "1")
        .output()
        .expect("run mpirun");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(stdout.matches("pmix-sys child ok").count(), 2, "{stdout}");
}

/// One of the two processes: init, put a value naming this rank, commit, fence with data
/// collection, read the other rank's value, the job size and node ids, finalize.
fn child() {
    let mut me = pmix_proc_t::default();
    // SAFETY: `me` is writable; no info array.
    ok(unsafe { PMIx_Init(&mut me, null_mut(), 0) });
    assert!(me.rank < 2);

    let wildcard = proc_of(&me.nspace, PMIX_RANK_WILDCARD);
    let mut val: *mut pmix_value_t = null_mut();
    // SAFETY: valid proc, NUL-terminated key, writable out pointer.
    ok(unsafe { PMIx_Get(&wildcard, key(PMIX_JOB_SIZE).as_ptr(), null(), 0, &mut val) });
    // SAFETY: PMIx_Get succeeded: `val` is a live value of the type it says.
    unsafe {
        assert_eq!((*val).type_, PMIX_UINT32 as pmix_data_type_t);
        assert_eq!(*(*val).data.uint32.as_ref(), 2);
        pmix_value_release(val);
    }

    let text = CString::new(format!("rank {}", me.rank)).unwrap();
    let mut v = pmix_value_t::default();
    // SAFETY: `v` is writable; a PMIX_STRING's data is the string itself (not a pointer to
    // it, as for the other types), which PMIx_Value_load copies.
    ok(unsafe {
        PMIx_Value_load(
            &mut v,
            text.as_ptr().cast(),
            PMIX_STRING as pmix_data_type_t,
        )
    });
    // Keys starting with "pmix" are PMIx's own attributes.
    let name = CString::new("smoke-value").unwrap();
    // SAFETY: valid key and value; PMIx_Put copies the value.
    ok(unsafe { PMIx_Put(PMIX_GLOBAL as pmix_scope_t, name.as_ptr(), &mut v) });
    // SAFETY: `v` holds the copy PMIx_Value_load made; destruct frees it.
    unsafe { PMIx_Value_destruct(&mut v) };
    // SAFETY: no arguments.
    ok(unsafe { PMIx_Commit() });

    let mut collect = pmix_info_t::default();
    let yes = true;
    // SAFETY: `collect` is writable, the key NUL-terminated, the data a bool as PMIX_BOOL says.
    ok(unsafe {
        PMIx_Info_load(
            &mut collect,
            key(PMIX_COLLECT_DATA).as_ptr(),
            (&yes as *const bool).cast(),
            PMIX_BOOL as pmix_data_type_t,
        )
    });
    // SAFETY: a null proc array means the whole namespace; one info.
    ok(unsafe { PMIx_Fence(null(), 0, &collect, 1) });

    let other = proc_of(&me.nspace, 1 - me.rank);
    let mut got: *mut pmix_value_t = null_mut();
    // SAFETY: as above.
    ok(unsafe { PMIx_Get(&other, name.as_ptr(), null(), 0, &mut got) });
    // SAFETY: a live PMIX_STRING value.
    unsafe {
        assert_eq!((*got).type_, PMIX_STRING as pmix_data_type_t);
        let s = CStr::from_ptr(*(*got).data.string.as_ref());
        assert_eq!(s.to_str().unwrap(), format!("rank {}", 1 - me.rank));
        pmix_value_release(got);
    }
    let absent = CString::new("smoke-nobody-put-this").unwrap();
    let mut none: *mut pmix_value_t = null_mut();
    let mut optional = pmix_info_t::default();
    // SAFETY: as for `collect`.
    ok(unsafe {
        PMIx_Info_load(
            &mut optional,
            key(PMIX_OPTIONAL).as_ptr(),
            (&yes as *const bool).cast(),
            PMIX_BOOL as pmix_data_type_t,
        )
    });
    // SAFETY: as above; PMIX_OPTIONAL: answer from what is here, do not wait for it.
    let rc = unsafe { PMIx_Get(&other, absent.as_ptr(), &optional, 1, &mut none) };
    assert_eq!(rc, PMIX_ERR_NOT_FOUND, "{}", error_string(rc));
    // SAFETY: the infos hold copies made by PMIx_Info_load.
    unsafe {
        PMIx_Value_destruct(&mut collect.value);
        PMIx_Value_destruct(&mut optional.value);
    }

    // Locality: the ranks on this node, a comma-separated list (every server has it; node
    // ids per rank, PMIX_NODEID, Open MPI 4.1's does not give).
    let mut peers: *mut pmix_value_t = null_mut();
    // SAFETY: as above.
    ok(unsafe {
        PMIx_Get(
            &wildcard,
            key(PMIX_LOCAL_PEERS).as_ptr(),
            null(),
            0,
            &mut peers,
        )
    });
    // SAFETY: a live value, a string when its type says so.
    unsafe {
        assert_eq!((*peers).type_, PMIX_STRING as pmix_data_type_t);
        let s = CStr::from_ptr(*(*peers).data.string.as_ref());
        assert_eq!(s.to_str().unwrap(), "0,1");
        pmix_value_release(peers);
    }
    // SAFETY: initialized above; no info.
    ok(unsafe { PMIx_Finalize(null(), 0) });
    println!("pmix-sys child ok");
}
