//! The thread level a rank starts at is in the types of its handles: what a worker thread
//! needs is `Send + Sync` at the serialized and multiple levels, and at the single and
//! funneled levels sharing it with another thread does not compile.

use ch4::{Communicator, Context, Funneled, Message, Multiple, OwnedRequest, Serialized, Single};
use ch4::{SelectedNetmod as N, SelectedShm as S};
use static_assertions::{assert_impl_all, assert_not_impl_any};

assert_impl_all!(Context<N, S, Multiple>: Send, Sync, Clone);
assert_impl_all!(Communicator<N, S, Multiple>: Send, Sync, Clone);
assert_impl_all!(OwnedRequest<u64, N, S, Multiple>: Send, Sync);
assert_impl_all!(Message<N, S, Multiple>: Send, Sync);
assert_impl_all!(ch4::process::Universe<Multiple>: Send, Sync);
assert_impl_all!(Context<N, S, Serialized>: Send, Sync);
assert_impl_all!(Communicator<N, S, Serialized>: Send, Sync);

assert_not_impl_any!(Context<N, S, Single>: Send, Sync);
assert_not_impl_any!(Communicator<N, S, Single>: Send, Sync);
assert_not_impl_any!(OwnedRequest<u64, N, S, Single>: Send, Sync);
assert_not_impl_any!(Message<N, S, Single>: Send, Sync);
assert_not_impl_any!(Context<N, S, Funneled>: Send, Sync);
assert_not_impl_any!(Communicator<N, S, Funneled>: Send, Sync);

/// What the compiler says when a program shares a handle beyond its level: each case in
/// `tests/thread_levels/` must fail to compile with the error recorded beside it (regenerate
/// with `TRYBUILD=overwrite` after a compiler upgrade changes the wording).
#[test]
fn sharing_beyond_the_level_does_not_compile() {
    let cases = trybuild::TestCases::new();
    cases.compile_fail("tests/thread_levels/*.rs");
}

#[test]
fn a_rank_reports_the_level_of_its_type() {
    let levels = ch4::threads::Threads::new(1)
        .run(|ctx| Ok(ctx.thread_level()))
        .unwrap();
    assert_eq!(levels, [ch4::Level::Single]);
    let levels = ch4::threads::Threads::new(1)
        .thread_level(Serialized)
        .run(|ctx| Ok(ctx.thread_level()))
        .unwrap();
    assert_eq!(levels, [ch4::Level::Serialized]);
}

#[test]
fn serialized_refuses_a_second_thread_inside_a_call() {
    use std::sync::atomic::{AtomicBool, Ordering};
    // Rank 0 blocks one thread in a receive from rank 1 while another of its threads calls:
    // the call is refused with a clear error; then rank 1 sends, and the receive ends.
    let refused_seen = AtomicBool::new(false);
    let out = ch4::threads::Threads::new(2)
        .thread_level(Serialized)
        .run(|ctx| {
            let world = ctx.world();
            if world.rank() == 1 {
                while !refused_seen.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                world.send(&[42u32], 0, 7)?;
                return Ok(None);
            }
            std::thread::scope(|s| loop {
                let receiver = s.spawn(|| {
                    let mut got = [0u32];
                    world.recv(&mut got, 1, 7).map(|_| got[0])
                });
                // Until the receiver is inside its call, a probe succeeds; then it is refused.
                // The race is symmetric: a receiver entering while a probe is inside is the one
                // refused, and it ends at once (rank 1 has not sent yet); then try again.
                let refused = loop {
                    if receiver.is_finished() {
                        break None;
                    }
                    match ctx.self_comm().iprobe(0, 0) {
                        Ok(_) => std::thread::yield_now(),
                        Err(e) => break Some(e),
                    }
                };
                let Some(refused) = refused else {
                    let lost = receiver.join().unwrap().unwrap_err();
                    assert_eq!(lost.kind(), ch4::ErrorKind::Arg, "{lost}");
                    continue;
                };
                refused_seen.store(true, Ordering::Release);
                assert_eq!(refused.kind(), ch4::ErrorKind::Arg);
                assert!(
                    refused.to_string().contains("MPI_THREAD_SERIALIZED"),
                    "{refused}"
                );
                break receiver.join().unwrap().map(Some);
            })
        })
        .unwrap();
    assert_eq!(out, [Some(42), None]);
}
