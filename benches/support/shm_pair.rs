//! Two ranks on one shared-memory segment, both stepped by the calling thread: the set-up of
//! the benches that count the facade's instructions under callgrind (no waiting, so the counts
//! are exact).

use std::sync::Arc;

use ch4::{Context, ThreadLevel};
use ch4_core::core::DeviceConfig;
use ch4_core::{Device, NoNetmod};
use shm::{Segment, ShmTransport};

/// A rank of the pair.
pub type Rank<L> = Context<NoNetmod, ShmTransport, L>;

/// Ranks 0 and 1 of a job of two at level `L`, on one anonymous segment (64 KiB rings, 16 KiB
/// eager limit).
pub fn shm_pair<L: ThreadLevel>() -> ch4::Result<(Rank<L>, Rank<L>)> {
    let seg = Arc::new(Segment::anonymous(2, shm::Geometry::with_ring(1 << 16))?);
    let rank = |me: usize| -> ch4::Result<Rank<L>> {
        let t = ShmTransport::new(seg.clone(), me, &[0, 1], 2, 16 << 10, 0)?;
        Ok(Context::at_level(Device::new(
            NoNetmod,
            t,
            me as u32,
            2,
            DeviceConfig::default(),
        )?))
    };
    Ok((rank(0)?, rank(1)?))
}
