//! Compile-time behaviour of `#[avoid_repeat]`: what must compile, and the errors misuse
//! gets (committed `.stderr`; regenerate with `TRYBUILD=overwrite` and review the diff).

#[test]
fn avoid_repeat() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/avoid_repeat/pass/*.rs");
    cases.compile_fail("tests/avoid_repeat/fail/*.rs");
}
