//! facade (being written)
