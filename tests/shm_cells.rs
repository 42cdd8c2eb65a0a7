//! Many senders into one receiver's cell queue.
//!
//! Six ranks on one node set up like a crowded node, scaled down (4 KiB rings taking records of
//! up to 48 bytes, four 512-byte cells per rank): five ranks stream windows of nonblocking sends
//! of mixed sizes (eager and rendezvous) to rank 0, so they append to its cell queue
//! concurrently, run out of cells and wait for them, while their rings carry the smallest
//! records. Rank 0 receives with
//! ANY_SOURCE and checks that every sender's messages arrive whole and in the order sent.

mod common;

use ch4::{Result, ANY_SOURCE, ANY_TAG};
use common::pattern;

const RANKS: u32 = 6;
const PER_SENDER: usize = 300;
const WINDOW: usize = 25;

/// Sizes from empty through eager (≤ 64) to rendezvous in several 100-byte pieces.
fn size_of(i: usize) -> usize {
    (i * 37) % 420
}

#[test]
fn five_senders_share_one_queue_and_keep_their_order() {
    let through_cells = common::small(RANKS)
        .ranks_per_node(RANKS)
        .shm_geometry(shm::Geometry {
            ring_capacity: 4096,
            cell_size: 512,
            cells_per_rank: 4,
        })
        .shm_ring_record_max(48)
        .run(|ctx| -> Result<u64> {
            let w = ctx.world();
            if w.rank() == 0 {
                let mut next = vec![0usize; RANKS as usize];
                let mut buf = vec![0u8; 512];
                for _ in 0..PER_SENDER * (RANKS as usize - 1) {
                    let st = w.recv(&mut buf, ANY_SOURCE, ANY_TAG)?;
                    let (src, i) = (st.source as usize, st.tag as usize);
                    assert_eq!(i, next[src], "message from rank {src} out of order");
                    let n = size_of(src * 1000 + i);
                    assert_eq!(st.bytes, n, "rank {src} message {i}");
                    assert_eq!(&buf[..n], &pattern(src * 1000 + i, n)[..]);
                    next[src] += 1;
                }
            } else {
                let me = w.rank() as usize;
                let msgs: Vec<Vec<u8>> = (0..PER_SENDER)
                    .map(|i| pattern(me * 1000 + i, size_of(me * 1000 + i)))
                    .collect();
                for chunk in (0..PER_SENDER).collect::<Vec<_>>().chunks(WINDOW) {
                    ctx.scope(|s| {
                        let reqs = chunk
                            .iter()
                            .map(|&i| w.isend(s, &msgs[i], 0, i as i32))
                            .collect::<Result<Vec<_>>>()?;
                        s.wait_all(reqs).map(drop)
                    })?;
                }
            }
            w.barrier()?;
            Ok(ctx.device()?.shm().cell_sends())
        })
        .unwrap();
    assert!(
        through_cells[1..].iter().all(|&n| n > 0),
        "every sender's ring overflowed into cells: {through_cells:?}"
    );
}
