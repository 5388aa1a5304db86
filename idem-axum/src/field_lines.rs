//! Arbitrary header field lines, for the property tests of what reads a header.

use proptest::prelude::*;

/// Fewer than `lines` field lines, each at most `longest` bytes of what a field value may
/// hold: visible ASCII, space, tab and obs-text.
pub(crate) fn field_lines(longest: usize, lines: usize) -> impl Strategy<Value = Vec<Vec<u8>>> {
    let line = format!("(?-u:[\\t -~\\x80-\\xff]{{0,{longest}}})");
    prop::collection::vec(
        proptest::string::bytes_regex(&line).expect("a regex"),
        0..lines,
    )
}
