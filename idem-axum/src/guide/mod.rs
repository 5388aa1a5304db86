// The guide is markdown, one file per page beside this one, so that it reads in the
// repository as well as on docs.rs (as axum keeps its long docs in `src/docs/*.md`). Each
// page is an empty module: its name is the page's, and it holds no items.
#![doc = include_str!("README.md")]

#[doc = include_str!("guards.md")]
pub mod guards {}

#[doc = include_str!("refusals.md")]
pub mod refusals {}

#[doc = include_str!("client_identity.md")]
pub mod client_identity {}

#[doc = include_str!("store_failure.md")]
pub mod store_failure {}

#[doc = include_str!("stores.md")]
pub mod stores {}

#[doc = include_str!("transactional_completion.md")]
pub mod transactional_completion {}

#[doc = include_str!("run_once.md")]
pub mod run_once {}

#[doc = include_str!("locks.md")]
pub mod locks {}

#[doc = include_str!("faults.md")]
pub mod faults {}

#[doc = include_str!("production.md")]
pub mod production {}

#[doc = include_str!("capacity.md")]
pub mod capacity {}

#[doc = include_str!("extending.md")]
pub mod extending {}

#[doc = include_str!("testing.md")]
pub mod testing {}
