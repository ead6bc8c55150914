//! `blocking`: runs store work on libuv's thread pool (a napi `AsyncTask`),
//! never on the JavaScript thread, and settles the call's promise with its
//! outcome. A panic of the work becomes a `PANIC` failure instead of
//! taking the Node process down.

use std::panic::{catch_unwind, AssertUnwindSafe};

use napi::bindgen_prelude::{AsyncTask, ToNapiValue, TypeName};
use napi::{Env, Task};

use crate::failure::{Failure, Outcome};

/// Work for the thread pool, run once.
pub struct Blocking<T> {
    work: Option<Box<dyn FnOnce() -> Outcome<T> + Send>>,
}

impl<T> std::fmt::Debug for Blocking<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Blocking")
            .field("done", &self.work.is_none())
            .finish()
    }
}

/// A promise of `work`'s outcome, computed on the thread pool.
pub fn blocking<T>(work: impl FnOnce() -> Outcome<T> + Send + 'static) -> AsyncTask<Blocking<T>>
where
    T: ToNapiValue + TypeName + Send + 'static,
{
    AsyncTask::new(Blocking {
        work: Some(Box::new(work)),
    })
}

/// Runs `work` on the calling thread, turning a panic into a failure.
pub fn guarded<T>(work: impl FnOnce() -> Outcome<T>) -> napi::Result<T> {
    match catch_unwind(AssertUnwindSafe(work)) {
        Ok(outcome) => outcome.map_err(Failure::into_napi),
        Err(payload) => Err(Failure::panic(payload).into_napi()),
    }
}

impl<T> Task for Blocking<T>
where
    T: ToNapiValue + TypeName + Send + 'static,
{
    type Output = T;
    type JsValue = T;

    fn compute(&mut self) -> napi::Result<T> {
        let work = self
            .work
            .take()
            .ok_or_else(|| Failure::panic(Box::new("a blocking task ran twice")).into_napi())?;
        guarded(work)
    }

    fn resolve(&mut self, _env: Env, output: T) -> napi::Result<T> {
        Ok(output)
    }
}
