//! Asynchronous progress and requests as futures (`ch4::progress`), ranks as threads at the
//! multiple level: a rendezvous send moves while its sender computes (no ch4 call) over the
//! TCP netmod and over shared memory streaming through the rings — and, as the control that
//! shows the test can fail, does not without the thread; owned requests awaited under two
//! executors (`futures`' and tokio's), with the thread and without; a future dropped while
//! pending cancels its receive.

use std::future::Future;
use std::time::{Duration, Instant};

use ch4::threads::Threads;
use ch4::{Context, Multiple};

/// A message long enough to go by rendezvous on every route, in pieces.
const LONG: usize = 4 << 20;
/// How long the sender computes (sleeps, making no ch4 call) before it waits.
const COMPUTE: Duration = Duration::from_millis(3000);

/// Two ranks at the multiple level; `tcp`: each its own node (the TCP netmod), else one node
/// whose shared memory streams large messages through its rings (no single-copy reads, which
/// the receiver alone would finish).
fn job(tcp: bool) -> Threads<Multiple> {
    let t = Threads::new(2).thread_level(Multiple).vcis(1);
    if tcp {
        t.ranks_per_node(1)
    } else {
        t.shm_single_copy(false)
    }
}

/// Rank 0 posts a long send and computes; rank 1 receives and says how long its receive took.
fn receive_time(tcp: bool, async_progress: bool) -> Duration {
    let times = job(tcp)
        .run(move |ctx: Context<_, _, Multiple>| {
            if async_progress {
                ctx.start_async_progress()?;
                assert!(ctx.async_progress());
            }
            let world = ctx.world();
            world.barrier()?;
            if world.rank() == 0 {
                let req = world.isend_owned(vec![7u8; LONG], 1, 3)?;
                std::thread::sleep(COMPUTE);
                let (_, st) = req.wait();
                st?;
                Ok(Duration::ZERO)
            } else {
                let start = Instant::now();
                let (buf, st) = world.irecv_owned(vec![0u8; LONG], 0, 3)?.wait();
                let took = start.elapsed();
                assert_eq!(st?.bytes, LONG);
                assert!(buf.iter().all(|&b| b == 7));
                Ok(took)
            }
        })
        .expect("the job");
    times[1]
}

#[test]
fn a_send_moves_over_tcp_while_its_sender_computes() {
    let took = receive_time(true, true);
    assert!(
        took < COMPUTE / 2,
        "with a progress thread the receive ended after {took:?}, the sender computing {COMPUTE:?}"
    );
}

#[test]
fn a_send_moves_over_shared_memory_while_its_sender_computes() {
    let took = receive_time(false, true);
    assert!(
        took < COMPUTE / 2,
        "with a progress thread the receive ended after {took:?}, the sender computing {COMPUTE:?}"
    );
}

#[test]
fn without_the_thread_the_data_waits_for_the_senders_next_call() {
    for tcp in [true, false] {
        let took = receive_time(tcp, false);
        assert!(
            took >= COMPUTE * 9 / 10,
            "without a progress thread the receive (tcp: {tcp}) ended after {took:?}, before \
             the sender stopped computing: the tests above would not show the thread's work"
        );
    }
}

/// A ring of owned requests awaited in one task per rank, under `executor`.
fn ring_of_futures(
    async_progress: bool,
    executor: fn(Context<ch4::SelectedNetmod, ch4::SelectedShm, Multiple>) -> ch4::Result<u64>,
) {
    let sums = Threads::new(3)
        .thread_level(Multiple)
        .ranks_per_node(2)
        .run(move |ctx: Context<_, _, Multiple>| {
            if async_progress {
                ctx.start_async_progress()?;
            }
            executor(ctx)
        })
        .expect("the job");
    // Each rank received its left neighbour's rank in every element, a long and a short one.
    assert_eq!(sums, vec![2 * 1000 + 2, 0, 1000 + 1]);
}

/// The body of [`ring_of_futures`]: a long and a short message to the right, awaited.
async fn ring_body(
    ctx: Context<ch4::SelectedNetmod, ch4::SelectedShm, Multiple>,
) -> ch4::Result<u64> {
    let world = ctx.world();
    let (me, n) = (world.rank(), world.size());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let long_in = world.irecv_owned(vec![0u64; 1000], left, 1)?;
    let short_in = world.irecv_owned(vec![0u64; 1], left, 2)?;
    let long_out = world.isend_owned(vec![me as u64; 1000], right, 1)?;
    let short_out = world.isend_owned(vec![me as u64; 1], right, 2)?;
    let (short, st) = short_in.await;
    st?;
    let (long, st) = long_in.await;
    st?;
    long_out.await.1?;
    short_out.await.1?;
    Ok(long.iter().sum::<u64>() + short[0])
}

#[test]
fn owned_requests_are_awaited_under_futures_executor_with_and_without_the_thread() {
    for async_progress in [false, true] {
        ring_of_futures(async_progress, |ctx| {
            futures::executor::block_on(ring_body(ctx))
        });
    }
}

#[test]
fn owned_requests_are_awaited_under_tokio_with_and_without_the_thread() {
    for async_progress in [false, true] {
        ring_of_futures(async_progress, |ctx| {
            tokio::runtime::Builder::new_current_thread()
                .build()
                .expect("a tokio runtime")
                .block_on(ring_body(ctx))
        });
    }
}

#[test]
fn a_pending_receive_dropped_as_a_future_is_cancelled() {
    job(true)
        .run(|ctx: Context<_, _, Multiple>| {
            ctx.start_async_progress()?;
            let world = ctx.world();
            if world.rank() == 1 {
                let mut pending = Box::pin(world.irecv_owned(vec![0u32; 4], 0, 9)?);
                // Polled once (nothing sent yet), then dropped: the receive is cancelled, so
                // the message sent later matches the next receive instead.
                let polled = futures::executor::block_on(futures::future::poll_fn(|cx| {
                    std::task::Poll::Ready(pending.as_mut().poll(cx).is_pending())
                }));
                assert!(polled);
                drop(pending);
                world.barrier()?;
                let (buf, st) = world.irecv_owned(vec![0u32; 4], 0, 9)?.wait();
                st?;
                assert_eq!(buf, vec![5; 4]);
            } else {
                world.barrier()?;
                world.send(&[5u32; 4], 1, 9)?;
            }
            Ok(())
        })
        .expect("the job");
}
