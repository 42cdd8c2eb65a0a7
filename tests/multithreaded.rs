//! Several threads per rank at `MPI_THREAD_MULTIPLE`, over every route (see `common`): threads
//! each on a communicator of their own (spread over the rank's VCIs) and several on one
//! communicator, blocking and nonblocking, with every message's order and content checked per
//! thread; communicators made by threads at once, and placed on a VCI by name; requests handed
//! between threads; and a stalled VCI that does not stop the others.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};

use ch4::{Communicator, Context, ErrorKind, Multiple, Netmod, Result, Shm, ANY_SOURCE, ANY_TAG};
use common::{pattern, EAGER};

/// Threads per rank in these tests: more than the host's two cores, as frameworks run.
const THREADS: usize = 4;

/// Messages each thread exchanges.
const MESSAGES: usize = 40;

/// The size of message `i`: around the eager limit and well past it, so eager, rendezvous and
/// pieces all take part.
fn size_of(i: usize) -> usize {
    [0, 1, EAGER - 1, EAGER, EAGER + 1, 300, 1000, 7][i % 8]
}

/// The message thread `t` sends as its `i`th.
fn message(t: usize, i: usize) -> Vec<u8> {
    pattern(t * 1000 + i, size_of(i))
}

/// Runs `f(t)` on `THREADS` threads and returns the first error.
fn on_threads(f: impl Fn(usize) -> Result<()> + Sync) -> Result<()> {
    std::thread::scope(|s| {
        let workers: Vec<_> = (0..THREADS)
            .map(|t| {
                s.spawn({
                    let f = &f;
                    move || f(t)
                })
            })
            .collect();
        workers
            .into_iter()
            .try_for_each(|w| w.join().expect("a worker thread panicked"))
    })
}

/// Each thread on a communicator of its own (made by the main thread): with its peer thread on
/// the other rank it swaps `MESSAGES` messages, alternating blocking sends and receives with
/// nonblocking ones, receiving with ANY_SOURCE and ANY_TAG: on its own communicator nothing of another
/// thread's can match, so every message is the next of its peer thread, in order.
fn threads_on_own_communicators<N: Netmod + Send, S: Shm + Send>(
    ctx: Context<N, S, Multiple>,
) -> Result<()> {
    let world = ctx.world();
    let comms = (0..THREADS)
        .map(|_| world.dup())
        .collect::<Result<Vec<Communicator<N, S, Multiple>>>>()?;
    if ctx.vcis() > 1 {
        let used: std::collections::BTreeSet<usize> = comms.iter().map(|c| c.vci()).collect();
        assert!(used.len() > 1, "dups spread over the VCIs: {used:?}");
    }
    if world.rank() > 1 {
        return Ok(());
    }
    let peer = 1 - world.rank();
    on_threads(|t| {
        let comm = &comms[t];
        let mut buf = vec![0u8; 2000];
        for i in 0..MESSAGES {
            let out = message(t, i);
            if i % 2 == 0 {
                // Blocking both ways: one side sends first, the other receives first (a
                // rendezvous send waits for its receive).
                let st = if comm.rank() == 0 {
                    comm.send(&out, peer, i as i32)?;
                    comm.recv(&mut buf, ANY_SOURCE, ANY_TAG)?
                } else {
                    let st = comm.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
                    comm.send(&out, peer, i as i32)?;
                    st
                };
                assert_eq!((st.source, st.tag, st.bytes), (peer, i as i32, out.len()));
                assert_eq!(&buf[..st.bytes], &out[..], "thread {t} message {i}");
            } else {
                let st = ctx.scope(|s| {
                    let r = comm.irecv(s, &mut buf, ANY_SOURCE, ANY_TAG)?;
                    let w = comm.isend(s, &out, peer, i as i32)?;
                    let st = s.wait_all([r, w])?;
                    Ok::<_, ch4::Error>(st[0])
                })?;
                assert_eq!((st.tag, st.bytes), (i as i32, out.len()));
                assert_eq!(&buf[..st.bytes], &out[..], "thread {t} message {i}");
            }
        }
        Ok(())
    })
}
on_all_routes_multiple!(own_communicators, 2, threads_on_own_communicators);

/// Every thread on the world communicator at once, thread `t` with tag `t`: a receive names
/// its tag, so each thread gets its peer thread's messages, in order, whatever the others do.
fn threads_share_a_communicator<N: Netmod + Send, S: Shm + Send>(
    ctx: Context<N, S, Multiple>,
) -> Result<()> {
    let world = ctx.world();
    if world.rank() > 1 {
        return Ok(());
    }
    let peer = 1 - world.rank();
    on_threads(|t| {
        let tag = t as i32;
        for i in 0..MESSAGES {
            let out = message(t, i);
            let recv = world.irecv_owned(vec![0u8; 2000], peer, tag)?;
            world.send(&out, peer, tag)?;
            let (buf, st) = recv.wait();
            let st = st?;
            assert_eq!((st.source, st.tag, st.bytes), (peer, tag, out.len()));
            assert_eq!(&buf[..st.bytes], &out[..], "thread {t} message {i}");
        }
        Ok(())
    })
}
on_all_routes_multiple!(shared_communicator, 2, threads_share_a_communicator);

/// Threads make communicators at once, each from a communicator of its own (MPI allows
/// collectives on different communicators concurrently), then use them: the context ids they
/// agree on never collide, and collectives on each give each thread's own answer.
fn threads_make_communicators_at_once<N: Netmod + Send, S: Shm + Send>(
    ctx: Context<N, S, Multiple>,
) -> Result<()> {
    let world = ctx.world();
    let parents = (0..THREADS)
        .map(|_| world.dup())
        .collect::<Result<Vec<Communicator<N, S, Multiple>>>>()?;
    let (rank, size) = (world.rank(), world.size());
    on_threads(|t| {
        let parent = &parents[t];
        for round in 0..3 {
            let comm = parent.dup()?;
            let half = comm.split(rank % 2, rank)?.expect("a color");
            let mut total = [0u64];
            comm.allreduce(&[(t * 100 + round) as u64], &mut total, ch4::op::sum)?;
            assert_eq!(total[0], ((t * 100 + round) * size as usize) as u64);
            let mut members = [0u32];
            half.allreduce(&[1u32], &mut members, ch4::op::sum)?;
            assert_eq!(members[0] as i32, (size + 1 - rank % 2) / 2);
            // A message on the new communicator reaches only it.
            let next = (comm.rank() + 1) % comm.size();
            let prev = (comm.rank() + comm.size() - 1) % comm.size();
            let mut got = [0u64];
            comm.sendrecv(&[t as u64], next, 3, &mut got, prev, 3)?;
            assert_eq!(got[0], t as u64);
            comm.barrier()?;
            half.free()?;
            comm.free()?;
        }
        Ok(())
    })
}
on_all_routes_multiple!(concurrent_creation, 3, threads_make_communicators_at_once);

/// A request started on one thread is finished on another; matched probes taken by threads
/// at once each receive their own message.
fn requests_move_between_threads<N: Netmod + Send, S: Shm + Send>(
    ctx: Context<N, S, Multiple>,
) -> Result<()> {
    let world = ctx.world();
    let comm = world.dup()?;
    if world.rank() > 1 {
        return Ok(());
    }
    let peer = 1 - world.rank();
    // Owned receives started here, waited for by the threads.
    let recvs = (0..THREADS)
        .map(|t| comm.irecv_owned(vec![0u8; 2000], peer, t as i32))
        .collect::<Result<Vec<_>>>()?;
    std::thread::scope(|s| -> Result<()> {
        let workers: Vec<_> = recvs
            .into_iter()
            .enumerate()
            .map(|(t, r)| {
                let comm = comm.clone();
                s.spawn(move || -> Result<()> {
                    comm.send(&message(t, 0), peer, t as i32)?;
                    let (buf, st) = r.wait();
                    let st = st?;
                    assert_eq!(&buf[..st.bytes], &message(t, 0)[..]);
                    // Then by matched probe: each thread takes its tag's message whole.
                    comm.send(&message(t, 1), peer, 100 + t as i32)?;
                    let (msg, st) = comm.mprobe(peer, 100 + t as i32)?;
                    let mut buf = vec![0u8; st.bytes];
                    msg.recv(&mut buf)?;
                    assert_eq!(buf, message(t, 1));
                    Ok(())
                })
            })
            .collect();
        for w in workers {
            w.join().expect("a worker panicked")?;
        }
        Ok(())
    })
}
on_all_routes_multiple!(moving_requests, 2, requests_move_between_threads);

/// No global lock: with the network of one VCI stalled (the in-process NIC takes nothing),
/// traffic of a communicator on another VCI of the same ranks completes; once the stall ends,
/// the stalled VCI's message arrives too.
#[test]
fn a_stalled_vci_does_not_stop_the_others() {
    let stalled_first = AtomicBool::new(false);
    common::small(2)
        .ranks_per_node(1)
        .thread_level(Multiple)
        .vcis(2)
        .run_with::<inproc::InprocNet<inproc::Native>, _, _>(|ctx| {
            let world = ctx.world();
            let peer = 1 - world.rank();
            // Dups alternate over the two VCIs: find one on each.
            let a = world.dup()?;
            let b = loop {
                let c = world.dup()?;
                if c.vci() != a.vci() {
                    break c;
                }
            };
            if world.rank() == 0 {
                a.device()?.netmod_mut().engine_mut().set_stalled(true);
                stalled_first.store(true, Ordering::Release);
                // A's send cannot leave; B's traffic flows meanwhile.
                let held = a.isend_owned(vec![7u8; 4], peer, 1)?;
                for i in 0..20u32 {
                    let mut got = [0u32];
                    b.sendrecv(&[i], peer, 2, &mut got, peer, 2)?;
                    assert_eq!(got[0], i);
                }
                a.device()?.netmod_mut().engine_mut().set_stalled(false);
                held.wait().1?;
            } else {
                while !stalled_first.load(Ordering::Acquire) {
                    std::thread::yield_now();
                }
                for i in 0..20u32 {
                    let mut got = [0u32];
                    b.sendrecv(&[i], peer, 2, &mut got, peer, 2)?;
                    assert_eq!(got[0], i);
                }
                let mut got = [0u8; 4];
                a.recv(&mut got, peer, 1)?;
                assert_eq!(got, [7; 4]);
            }
            Ok(())
        })
        .unwrap();
}

/// More VCIs than the single-threaded levels allow is refused with a clear error.
#[test]
fn several_vcis_need_the_multiple_level() {
    let e = ch4::threads::Threads::new(1)
        .vcis(2)
        .run(|_| Ok(()))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Arg);
    assert!(e.to_string().contains("multiple"), "{e}");
}

/// A communicator placed on a VCI by name (`dup_on_vci`): it is there on every member, its
/// traffic flows, and members that name different VCIs all get an error instead of a
/// communicator whose halves could never meet.
fn communicators_placed_by_name<N: Netmod + Send, S: Shm + Send>(
    ctx: Context<N, S, Multiple>,
) -> Result<()> {
    let world = ctx.world();
    let last = ctx.vcis() - 1;
    let placed = world.dup_on_vci(last)?;
    assert_eq!(placed.vci(), last);
    let mut total = [0u32];
    placed.allreduce(&[1u32], &mut total, ch4::op::sum)?;
    assert_eq!(total[0], world.size() as u32);
    let peer = (world.rank() + 1) % world.size();
    let from = (world.rank() + world.size() - 1) % world.size();
    let mut got = [0u32];
    let st = placed.sendrecv(&[world.rank() as u32], peer, 5, &mut got, from, 5)?;
    assert_eq!((st.source, got[0]), (from, from as u32));
    if ctx.vcis() > 1 {
        let e = world
            .dup_on_vci(world.rank() as usize % ctx.vcis())
            .err()
            .expect("members naming different VCIs");
        assert_eq!(e.kind(), ErrorKind::Arg);
        assert!(e.to_string().contains("different VCIs"), "{e}");
    }
    let e = world
        .dup_on_vci(ctx.vcis())
        .err()
        .expect("a VCI past the last");
    assert_eq!(e.kind(), ErrorKind::Arg);
    Ok(())
}
on_all_routes_multiple!(placed_by_name, 3, communicators_placed_by_name);
