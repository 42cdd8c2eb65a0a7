//! Collectives (being written)
