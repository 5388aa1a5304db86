//! Macros for the tower boilerplate every service of this crate shares.

/// `get_ref`, `get_mut` and `into_inner` for a service whose wrapped service is its
/// field `inner: S`.
macro_rules! define_inner_service_accessors {
    () => {
        /// The wrapped service.
        pub fn get_ref(&self) -> &S {
            &self.inner
        }

        /// The wrapped service, mutably.
        pub fn get_mut(&mut self) -> &mut S {
            &mut self.inner
        }

        /// The wrapped service, unwrapped.
        pub fn into_inner(self) -> S {
            self.inner
        }
    };
}
