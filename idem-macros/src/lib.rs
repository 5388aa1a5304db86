//! Procedural macros for [idem](https://github.com/idem-rs/idem), used through
//! `idem-axum` (feature `macros`, on by default) rather than on their own.
//!
//! This crate will hold `#[avoid_repeat(timeout = "30s")]`: an attribute on an axum
//! handler that refuses a second request from the same client to the same handler while
//! the first one's key is held in the store. Its arguments are checked at compile time.
//! Until it lands, the crate exports nothing.
