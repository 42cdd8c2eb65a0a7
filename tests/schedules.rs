//! Collective schedules (`ch4_core::schedule`, `ch4_core::nbc`) over every route: each
//! algorithm's result checked at every member, several schedules outstanding at once on one
//! communicator and completed in another order than started, an operation that does not
//! commute kept in rank order, and a schedule moved on by waiting for another request.

mod common;

use ch4::{Context, Netmod, Result, Shm};
use ch4_core::buffer::RecvBuf;
use ch4_core::nbc;
use ch4_core::schedule::{Fold, Schedule};
use ch4_core::ReqHandle;

/// 2x2 matrices of wrapping u64s, multiplied: associative, not commutative.
fn matmul() -> Fold {
    Box::new(|acc: &mut [u8], other: &[u8]| {
        let get = |b: &[u8], i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
        for m in 0..acc.len() / 32 {
            let (a, b) = (&acc[m * 32..m * 32 + 32], &other[m * 32..m * 32 + 32]);
            let (a0, a1, a2, a3) = (get(a, 0), get(a, 1), get(a, 2), get(a, 3));
            let (b0, b1, b2, b3) = (get(b, 0), get(b, 1), get(b, 2), get(b, 3));
            let c = [
                a0.wrapping_mul(b0).wrapping_add(a1.wrapping_mul(b2)),
                a0.wrapping_mul(b1).wrapping_add(a1.wrapping_mul(b3)),
                a2.wrapping_mul(b0).wrapping_add(a3.wrapping_mul(b2)),
                a2.wrapping_mul(b1).wrapping_add(a3.wrapping_mul(b3)),
            ];
            for (i, v) in c.iter().enumerate() {
                acc[m * 32 + i * 8..m * 32 + i * 8 + 8].copy_from_slice(&v.to_le_bytes());
            }
        }
    })
}

/// Member `r`'s matrix: [[1, r+1], [0, 1]]-like but not commuting with the others'.
fn matrix(r: i32) -> Vec<u8> {
    [1u64, r as u64 + 1, r as u64 * 3 + 2, 1]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

/// The product of members `0..n`'s matrices in rank order.
fn product(n: i32) -> Vec<u8> {
    let mut acc = matrix(0);
    let mut f = matmul();
    for r in 1..n {
        f(&mut acc, &matrix(r));
    }
    acc
}

fn sum_u64() -> Fold {
    Box::new(|acc: &mut [u8], other: &[u8]| {
        for (a, b) in acc.chunks_exact_mut(8).zip(other.chunks_exact(8)) {
            let v = u64::from_le_bytes(a.try_into().unwrap())
                .wrapping_add(u64::from_le_bytes(b.try_into().unwrap()));
            a.copy_from_slice(&v.to_le_bytes());
        }
    })
}

/// A receive buffer over `out` for a schedule's deliveries.
fn output(out: &mut [u8]) -> RecvBuf {
    // SAFETY: every test below waits for the schedule that holds this buffer before it reads
    // or drops `out`, and touches `out` in no other way meanwhile.
    unsafe { RecvBuf::borrowed(out) }
}

fn every_algorithm<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    let (r, n) = (w.rank(), w.size());
    let id = w.id();
    let root = n - 1;

    // Started in this order, completed in reverse: tags keep them apart.
    let mut bcast_out = vec![0u8; 1000];
    let mut sum_out = vec![0u8; 16];
    let mut prod_out = vec![0u8; 32];
    let mut flat_out = vec![0u8; 32];
    let mut scan_out = vec![0u8; 32];
    let mut exscan_out = vec![0xeeu8; 32];
    let mut gather_out = vec![0u8; 3 * n as usize];
    let mut a2a_out = vec![0u8; 2 * n as usize];
    let mut rs_out = vec![0u8; 8];
    let handles: Vec<ReqHandle> = {
        let mut d = w.device()?;
        let mut hs = Vec::new();

        let mut s = Schedule::new(id);
        nbc::barrier(&mut s, r, n);
        hs.push(d.start_schedule(s, None)?);

        let mut s = Schedule::new(id);
        let data = if r == root {
            s.buffer((0..1000).map(|i| (i * 7) as u8).collect())
        } else {
            s.scratch(1000)
        };
        nbc::bcast(&mut s, r, n, root, data);
        let o = s.output(output(&mut bcast_out));
        s.deliver(data, o, 0);
        hs.push(d.start_schedule(s, None)?);

        let mut s = Schedule::new(id);
        s.set_fold(sum_u64());
        let acc = s.buffer(
            [r as u64 + 1, 10]
                .iter()
                .flat_map(|v| v.to_le_bytes())
                .collect(),
        );
        nbc::allreduce(&mut s, r, n, acc);
        let o = s.output(output(&mut sum_out));
        s.deliver(acc, o, 0);
        hs.push(d.start_schedule(s, None)?);

        let mut s = Schedule::new(id);
        s.set_fold(matmul());
        let acc = s.buffer(matrix(r));
        nbc::allreduce_flat(&mut s, r, n, acc);
        let o = s.output(output(&mut flat_out));
        s.deliver(acc, o, 0);
        hs.push(d.start_schedule(s, None)?);

        let mut s = Schedule::new(id);
        s.set_fold(matmul());
        let acc = s.buffer(matrix(r));
        nbc::reduce(&mut s, r, n, root, acc, false);
        if r == root {
            let o = s.output(output(&mut prod_out));
            s.deliver(acc, o, 0);
        }
        hs.push(d.start_schedule(s, None)?);

        for inclusive in [true, false] {
            let mut s = Schedule::new(id);
            s.set_fold(matmul());
            let partial = s.buffer(matrix(r));
            let result = s.scratch(32);
            nbc::scan(&mut s, r, n, partial, result, inclusive);
            if inclusive || r > 0 {
                let out = if inclusive {
                    &mut scan_out
                } else {
                    &mut exscan_out
                };
                let o = s.output(output(out));
                s.deliver(result, o, 0);
            }
            hs.push(d.start_schedule(s, None)?);
        }

        let mut s = Schedule::new(id);
        let mine = s.buffer(vec![r as u8; 3]);
        let all = s.scratch(3 * n as usize);
        let blocks: Vec<_> = (0..n as usize).map(|i| all.sub(3 * i, 3)).collect();
        nbc::gatherv(&mut s, r, n, 0, mine, &blocks)?;
        if r == 0 {
            let o = s.output(output(&mut gather_out));
            s.deliver(all, o, 0);
        }
        hs.push(d.start_schedule(s, None)?);

        let mut s = Schedule::new(id);
        let send = s.buffer((0..n).flat_map(|j| [r as u8, j as u8]).collect());
        let recv = s.scratch(2 * n as usize);
        let sb: Vec<_> = (0..n as usize).map(|j| send.sub(2 * j, 2)).collect();
        let rb: Vec<_> = (0..n as usize).map(|j| recv.sub(2 * j, 2)).collect();
        nbc::alltoallv(&mut s, r, n, &sb, &rb)?;
        let o = s.output(output(&mut a2a_out));
        s.deliver(recv, o, 0);
        hs.push(d.start_schedule(s, None)?);

        let mut s = Schedule::new(id);
        s.set_fold(sum_u64());
        let acc = s.buffer(
            (0..n)
                .flat_map(|j| (j as u64 * 100 + r as u64).to_le_bytes())
                .collect(),
        );
        let mine = s.scratch(8);
        let blocks: Vec<_> = (0..n as usize).map(|j| acc.sub(8 * j, 8)).collect();
        nbc::reduce_scatter(&mut s, r, n, acc, &blocks, mine)?;
        let o = s.output(output(&mut rs_out));
        s.deliver(mine, o, 0);
        hs.push(d.start_schedule(s, None)?);
        hs
    };
    for h in handles.into_iter().rev() {
        let st = w.device()?.wait(h)?;
        assert!(st.error.is_none());
    }
    assert!(bcast_out
        .iter()
        .enumerate()
        .all(|(i, &b)| r == root || b == (i * 7) as u8));
    let total: u64 = (1..=n as u64).sum();
    assert_eq!(&sum_out[..8], &total.to_le_bytes());
    assert_eq!(&sum_out[8..], &(10 * n as u64).to_le_bytes());
    if r == root {
        assert_eq!(prod_out, product(n), "reduce keeps rank order");
    }
    assert_eq!(
        flat_out,
        product(n),
        "the allreduce through member 0 keeps rank order"
    );
    assert_eq!(scan_out, product(r + 1), "scan at {r}");
    if r > 0 {
        assert_eq!(exscan_out, product(r), "exscan at {r}");
    } else {
        assert!(
            exscan_out.iter().all(|&b| b == 0xee),
            "exscan leaves rank 0's"
        );
    }
    if r == 0 {
        let want: Vec<u8> = (0..n).flat_map(|i| [i as u8; 3]).collect();
        assert_eq!(gather_out, want);
    }
    let want: Vec<u8> = (0..n).flat_map(|i| [i as u8, r as u8]).collect();
    assert_eq!(a2a_out, want);
    let want: u64 = n as u64 * r as u64 * 100 + (0..n as u64).sum::<u64>();
    assert_eq!(rs_out, want.to_le_bytes(), "reduce_scatter at {r}");
    w.barrier()
}
on_all_routes!(every_algorithm_test, 5, every_algorithm);

/// A schedule moves on while the program waits for something else: rank 0 waits for a
/// message that the last rank sends only once its barrier completed, which needs rank 0's part
/// of the barrier to run inside that receive.
fn moved_by_other_waits<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    let (r, n) = (w.rank(), w.size());
    let h = {
        let mut s = Schedule::new(w.id());
        nbc::barrier(&mut s, r, n);
        w.device()?.start_schedule(s, None)?
    };
    if r == 0 {
        let mut got = [0u8; 1];
        w.recv(&mut got, n - 1, 7)?;
        assert_eq!(got[0], 42);
        w.device()?.wait(h)?;
    } else {
        w.device()?.wait(h)?;
        if r == n - 1 {
            w.send(&[42u8], 0, 7)?;
        }
    }
    w.barrier()
}
on_all_routes!(moved_by_other_waits_test, 3, moved_by_other_waits);

/// `acc = acc`, whatever comes: of members folded in rank order, the result is member 0's.
/// Checks that the order of a large, non-commuting fold survives its staging buffer.
fn first_wins() -> Fold {
    Box::new(|_acc: &mut [u8], _other: &[u8]| {})
}

/// Large schedules one after another: from the second round on they work in the memory the
/// earlier ones left (buffers of 64 KiB and more are kept for reuse), which must neither leak
/// old bytes into a result nor mix one round's data into the next.
fn large_schedules_in_reused_memory<N: Netmod, S: Shm>(ctx: Context<N, S>) -> Result<()> {
    let w = ctx.world();
    let (r, n) = (w.rank(), w.size());
    let id = w.id();
    let words = 16 * 1024;
    for round in 0..3u64 {
        let mut sum_out = vec![0u8; 8 * words];
        let mut first_out = vec![0u8; 96 * 1024];
        let mut bcast_out = vec![0u8; 200 * 1024];
        let mut zero_out = vec![u8::from(round == 2); 90 * 1024];
        let handles = {
            let mut d = w.device()?;
            let mut hs = Vec::new();

            let mut s = Schedule::new(id);
            s.set_fold(sum_u64());
            let mine = (0..words as u64)
                .flat_map(|i| (i * (r as u64 + 1) + round).to_le_bytes())
                .collect();
            let acc = s.buffer(mine);
            nbc::allreduce(&mut s, r, n, acc);
            let o = s.output(output(&mut sum_out));
            s.deliver(acc, o, 0);
            hs.push(d.start_schedule(s, None)?);

            let mut s = Schedule::new(id);
            s.set_fold(first_wins());
            let acc = s.buffer(vec![0x80 | ((r as u8) ^ (round as u8 * 16)); 96 * 1024]);
            nbc::allreduce(&mut s, r, n, acc);
            let o = s.output(output(&mut first_out));
            s.deliver(acc, o, 0);
            hs.push(d.start_schedule(s, None)?);

            let mut s = Schedule::new(id);
            let data = if r == 0 {
                s.buffer(
                    (0..200 * 1024)
                        .map(|i| (i as u64 * 3 + round) as u8)
                        .collect(),
                )
            } else {
                s.scratch(200 * 1024)
            };
            nbc::bcast(&mut s, r, n, 0, data);
            let o = s.output(output(&mut bcast_out));
            s.deliver(data, o, 0);
            if round == 2 {
                // A working buffer nothing writes is delivered as it was made, zeros, though
                // it is likely made of a 96 KiB buffer of an earlier round (the best fit).
                let untouched = s.scratch(90 * 1024);
                let o = s.output(output(&mut zero_out));
                s.deliver(untouched, o, 0);
            }
            hs.push(d.start_schedule(s, None)?);
            hs
        };
        for h in handles {
            w.device()?.wait(h)?;
        }
        let ranks: u64 = (1..=n as u64).sum();
        for (i, word) in sum_out.chunks_exact(8).enumerate() {
            let want = i as u64 * ranks + round * n as u64;
            assert_eq!(
                u64::from_le_bytes(word.try_into().unwrap()),
                want,
                "word {i}"
            );
        }
        assert!(
            first_out.iter().all(|&b| b == 0x80 | (round as u8 * 16)),
            "round {round}"
        );
        assert!(bcast_out
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (i as u64 * 3 + round) as u8));
        assert!(
            zero_out.iter().all(|&b| b == 0),
            "round {round}: old bytes leaked"
        );
    }
    w.barrier()
}
on_all_routes!(
    large_schedules_in_reused_memory_test,
    3,
    large_schedules_in_reused_memory
);
