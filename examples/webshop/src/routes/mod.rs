//! The shop's handlers, one module per thing the shop deals in.

pub(crate) mod accounts;
pub(crate) mod orders;
pub(crate) mod pages;
pub(crate) mod payments;
pub(crate) mod tickets;
pub(crate) mod vouchers;
