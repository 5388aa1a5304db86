//! The command line: what to do, on which store, to which record.

use http::Method;
use idem_axum::idempotency::RecordKeys;
use idem_axum::identity::ClientId;
use idem_axum::store::{AnyStore, Key};
use idem_core::run_once::RunOnce;

/// How to call the tool, shown with every mistake in the command line.
pub(crate) const USAGE: &str = "\
usage: idem STORE show|remove RECORD [--namespace NAME] [--redis-namespace NAME]

STORE, the application's store:
  redis://HOST:PORT[/DB]  rediss://…  redis+unix:///PATH
  redis+cluster://HOST:PORT[,HOST:PORT…]
  redis+sentinel://HOST:PORT[,HOST:PORT…]/MASTER
  postgres://USER@HOST/DB
  sqlite://PATH

RECORD, by what the user saw of it:
  --route PATH [--method POST] (--client ID | --shared) --key KEY
      the record of an Idempotency-Key sent to a route (its path as the router declares
      it, /orders/{id}) by a client (as the application's client identity spells it)
  --route PATH [--method POST] --client ID --form-token TOKEN
      the record of a form submission with replay
  --run-once SCOPE --key KEY
      the record of a run-once key in its scope

--namespace: the idem-axum runtime's (default \"default\");
--redis-namespace: the RedisStore's (default \"idem\").";

/// What to do with the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Action {
    /// Print its state.
    Show,
    /// Remove it.
    Remove,
}

/// Which record, by what the user saw of it.
#[derive(Debug)]
pub(crate) enum Record {
    /// An `Idempotency-Key`'s: the client's, or (`None`) under a shared scope.
    Idempotency {
        method: Method,
        route: String,
        client: Option<ClientId>,
        key: String,
    },
    /// A form submission's.
    FormSubmission {
        method: Method,
        route: String,
        client: ClientId,
        token: String,
    },
    /// A run-once key's.
    RunOnce { scope: String, key: String },
}

/// A parsed command line.
#[derive(Debug)]
pub(crate) struct Command {
    pub(crate) store: String,
    pub(crate) action: Action,
    pub(crate) record: Record,
    pub(crate) namespace: String,
    pub(crate) redis_namespace: Option<String>,
}

impl Command {
    /// Reads `args`, the process's arguments after its name.
    ///
    /// # Errors
    ///
    /// What is wrong with them, with [`USAGE`].
    pub(crate) fn parse(args: impl IntoIterator<Item = String>) -> Result<Self, String> {
        let mut args = args.into_iter();
        let (Some(store), Some(action)) = (args.next(), args.next()) else {
            return Err(USAGE.to_owned());
        };
        let action = match action.as_str() {
            "show" => Action::Show,
            "remove" => Action::Remove,
            other => return Err(format!("unknown action {other:?}\n{USAGE}")),
        };
        let mut options = Options::default();
        while let Some(name) = args.next() {
            if name == "--shared" {
                options.shared = true;
                continue;
            }
            let value = args
                .next()
                .ok_or_else(|| format!("{name} needs a value\n{USAGE}"))?;
            options.set(&name, value)?;
        }
        Ok(Self {
            store,
            action,
            record: options.record()?,
            namespace: options.namespace.unwrap_or_else(|| "default".to_owned()),
            redis_namespace: options.redis_namespace,
        })
    }

    /// The store key of the record, derived as the application derives it.
    pub(crate) fn record_key(&self, store: &AnyStore) -> Key {
        let keys = RecordKeys::new(self.namespace.as_str());
        match &self.record {
            Record::Idempotency {
                method,
                route,
                client,
                key,
            } => keys.idempotency(method, route, client.as_ref(), key),
            Record::FormSubmission {
                method,
                route,
                client,
                token,
            } => keys.form_submission(method, route, client, token),
            Record::RunOnce { scope, key } => RunOnce::new(store.clone(), scope).key_of(key),
        }
    }
}

/// The options as given, each at most once.
#[derive(Debug, Default)]
struct Options {
    route: Option<String>,
    method: Option<String>,
    client: Option<String>,
    shared: bool,
    key: Option<String>,
    form_token: Option<String>,
    run_once: Option<String>,
    namespace: Option<String>,
    redis_namespace: Option<String>,
}

impl Options {
    fn set(&mut self, name: &str, value: String) -> Result<(), String> {
        let slot = match name {
            "--route" => &mut self.route,
            "--method" => &mut self.method,
            "--client" => &mut self.client,
            "--key" => &mut self.key,
            "--form-token" => &mut self.form_token,
            "--run-once" => &mut self.run_once,
            "--namespace" => &mut self.namespace,
            "--redis-namespace" => &mut self.redis_namespace,
            _ => return Err(format!("unknown option {name:?}\n{USAGE}")),
        };
        if slot.replace(value).is_some() {
            return Err(format!("{name} given twice\n{USAGE}"));
        }
        Ok(())
    }

    /// The record the options name, if they name exactly one.
    fn record(&mut self) -> Result<Record, String> {
        let method = match self.method.take() {
            Some(method) => Method::from_bytes(method.to_ascii_uppercase().as_bytes())
                .map_err(|_| format!("not an HTTP method: {method:?}"))?,
            None => Method::POST,
        };
        let client = self.client.take().map(ClientId::new);
        let record = match (self.run_once.take(), self.route.take()) {
            (Some(scope), None) => Record::RunOnce {
                scope,
                key: self.key.take().ok_or("--run-once needs --key")?,
            },
            (None, Some(route)) => match (self.form_token.take(), self.key.take()) {
                (Some(token), None) => Record::FormSubmission {
                    method,
                    route,
                    client: client.ok_or("--form-token needs --client")?,
                    token,
                },
                (None, Some(key)) if client.is_some() != self.shared => Record::Idempotency {
                    method,
                    route,
                    client,
                    key,
                },
                (None, Some(_)) => return Err("--key needs one of --client and --shared".into()),
                _ => return Err("--route needs one of --key and --form-token".into()),
            },
            _ => return Err(format!("name one record\n{USAGE}")),
        };
        let unused = [&self.key, &self.form_token].into_iter().flatten().next();
        match unused {
            Some(value) => Err(format!("{value:?} does not name a part of this record")),
            None => Ok(record),
        }
    }
}
