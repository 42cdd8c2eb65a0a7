//! Settings from the environment, read the same way by every transport.

/// The byte count in environment variable `name`, if it is set to one. A value that is not a
/// number is ignored, with a warning naming it, so a typo falls back to the default visibly.
pub fn bytes(name: &str) -> Option<usize> {
    let v = std::env::var(name).ok()?;
    let parsed = v.trim().parse().ok();
    if parsed.is_none() {
        tracing::warn!("{name}={v:?} is not a number of bytes; using the default");
    }
    parsed
}
