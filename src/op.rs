//! Reduction operators for [`Communicator::reduce`](crate::Communicator::reduce) and
//! [`Communicator::allreduce`](crate::Communicator::allreduce).
//!
//! An operator is any `FnMut(&mut T, &T)` that folds the second value into the first; it must
//! be associative and commutative, since the reduction tree combines values in an order that
//! depends on the communicator's size. These are the common ones; pass a closure for others.

use std::ops::{Add, BitAnd, BitOr, Mul};

/// `acc += x` (MPI_SUM).
pub fn sum<T: Copy + Add<Output = T>>(acc: &mut T, x: &T) {
    *acc = *acc + *x;
}

/// `acc *= x` (MPI_PROD).
pub fn prod<T: Copy + Mul<Output = T>>(acc: &mut T, x: &T) {
    *acc = *acc * *x;
}

/// `acc = min(acc, x)` (MPI_MIN); for floats, a NaN on either side is kept out when possible.
pub fn min<T: Copy + PartialOrd>(acc: &mut T, x: &T) {
    if *x < *acc {
        *acc = *x;
    }
}

/// `acc = max(acc, x)` (MPI_MAX).
pub fn max<T: Copy + PartialOrd>(acc: &mut T, x: &T) {
    if *x > *acc {
        *acc = *x;
    }
}

/// `acc &= x` (MPI_BAND).
pub fn band<T: Copy + BitAnd<Output = T>>(acc: &mut T, x: &T) {
    *acc = *acc & *x;
}

/// `acc |= x` (MPI_BOR).
pub fn bor<T: Copy + BitOr<Output = T>>(acc: &mut T, x: &T) {
    *acc = *acc | *x;
}
