//! What a [`RedisStore`](crate::RedisStore) learns of its server(s) on each new connection:
//! the version, which picks how `acquire` and `begin_record` take a key and rules out
//! servers too old for the rest, and the eviction policy, under which Redis may delete keys
//! that still live.

use std::collections::BTreeMap;
use std::fmt;

use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};
use redis::{Cmd, RedisError, RedisResult, Value};

use crate::RedisSetupError;
use crate::connection::Link;
use idem_core::StoreError;

/// The oldest server the store runs on: `BLPOP` takes fractional timeouts from 6.0 on.
const OLDEST: Version = Version::new(6, 0, 0);

/// `SET` takes `NX` and `GET` together from 7.0 on.
const SET_NX_GET: Version = Version::new(7, 0, 0);

/// What a [`RedisStore`](crate::RedisStore) does with a server that may evict keys: one whose
/// `maxmemory-policy` is not `noeviction`.
///
/// Every key idem writes has a TTL, so every eviction policy, `volatile-*` as much as
/// `allkeys-*`, may delete a live anti-repeat window, idempotency record or lock when
/// Redis runs short of memory, and the duplicate it stood for then gets through. The
/// store reads the policy (`CONFIG GET maxmemory-policy`) whenever it opens its shared
/// connection. Where the server does not allow `CONFIG` (as managed services often do),
/// the check is skipped and logged at `info`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum EvictionCheck {
    /// Log a warning (`tracing::warn!`) and use the server.
    #[default]
    Warn,
    /// Do not use the server: [`RedisStoreBuilder::connect`](crate::RedisStoreBuilder::connect)
    /// fails with [`RedisSetupError::EvictionPolicy`], and on a
    /// [lazy](crate::RedisStoreBuilder::with_lazy_connect) store every operation fails
    /// with [`StoreError::Backend`], its source that same error, until the policy is
    /// `noeviction` (the store asks again at most once a second).
    Refuse,
}

/// How the store checks the server(s) it connects to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Checks {
    pub(crate) eviction: EvictionCheck,
    /// Acquire and begin records with the script whatever the version, to test that path
    /// on a new server.
    pub(crate) script_acquire: bool,
}

/// How `acquire` without fencing takes a key, and `begin_record` begins a record: both
/// return the value found (who held the lock, the record there), or nil when the key was
/// free and is now taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AcquireCommand {
    /// `SET key owner NX PX ttl GET`: one command, Redis 7.0 or newer.
    SetNxGet,
    /// `GET`, then `SET NX PX` if free, in one script: any supported version.
    Script,
}

/// Why the store does not use a server.
#[derive(Debug, Clone)]
pub(crate) enum Refusal {
    /// Older than the store supports; the server's own account of its version.
    Version(String),
    /// May evict keys, and the store was set to refuse that; the policy.
    Eviction(String),
}

impl From<Refusal> for StoreError {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::Version(version) => {
                Self::backend(RedisSetupError::UnsupportedVersion { version })
            }
            Refusal::Eviction(policy) => Self::backend(RedisSetupError::EvictionPolicy { policy }),
        }
    }
}

/// What the check found: use the server this way, or not at all.
pub(crate) type Verdict = Result<AcquireCommand, Refusal>;

/// Reads the version and eviction policy of the server, or of every primary of a cluster,
/// and judges them.
///
/// A server that will not say (`INFO` or `CONFIG` refused, as managed services often do)
/// is used all the same: without a version, `acquire` takes the script, which every
/// supported version runs; without a policy, the eviction check is skipped, and logged.
///
/// # Errors
///
/// When the connection fails; a command the server refuses is not an error here.
pub(crate) async fn check(link: &mut Link, checks: Checks) -> RedisResult<Verdict> {
    let infos = every_node(link, redis::cmd("INFO").arg("server")).await?;
    let mut versions = Vec::with_capacity(infos.len());
    for info in infos {
        let version = info
            .ok()
            .and_then(|info| redis::from_redis_value::<String>(info).ok())
            .and_then(|info| ServerVersion::from_info(&info));
        if version.is_none() {
            tracing::info!(
                "idem: could not read the Redis version (INFO server); acquiring with a script, which every supported version runs"
            );
        }
        versions.push(version);
    }
    if let Some(old) = versions.iter().flatten().find(|v| v.version < OLDEST) {
        return Ok(Err(Refusal::Version(old.to_string())));
    }
    let policies = every_node(
        link,
        redis::cmd("CONFIG").arg("GET").arg("maxmemory-policy"),
    )
    .await?
    .into_iter()
    .map(eviction_policy)
    .collect::<Vec<_>>();
    if let Some(policy) = policies.into_iter().flatten().find(|p| p != "noeviction") {
        match checks.eviction {
            EvictionCheck::Refuse => return Ok(Err(Refusal::Eviction(policy))),
            EvictionCheck::Warn => tracing::warn!(
                %policy,
                "idem: Redis may evict keys under memory pressure (maxmemory-policy {policy}); an evicted window, record or lock lets a duplicate through: set maxmemory-policy noeviction"
            ),
        }
    }
    let set_nx_get = !checks.script_acquire
        && versions
            .iter()
            .all(|version| version.as_ref().is_some_and(|v| v.version >= SET_NX_GET));
    Ok(Ok(if set_nx_get {
        AcquireCommand::SetNxGet
    } else {
        AcquireCommand::Script
    }))
}

/// The eviction policy in one node's answer to `CONFIG GET maxmemory-policy`, or `None`
/// (logged) when it would not say.
fn eviction_policy(answer: RedisResult<redis::Value>) -> Option<String> {
    let answer = answer.and_then(|value| {
        redis::from_redis_value::<BTreeMap<String, String>>(value).map_err(Into::into)
    });
    match answer.map(|mut config| config.remove("maxmemory-policy")) {
        Ok(Some(policy)) => Some(policy),
        Ok(None) => {
            tracing::info!(
                "idem: Redis did not tell its maxmemory-policy; make sure it is noeviction"
            );
            None
        }
        Err(error) => {
            tracing::info!(
                %error,
                "idem: could not read Redis' maxmemory-policy (CONFIG GET); make sure it is noeviction"
            );
            None
        }
    }
}

/// The answer of every node to `cmd`: the server's on a standalone connection, every
/// primary's in a cluster. A node that refuses the command answers with its error.
///
/// # Errors
///
/// When the connection fails.
async fn every_node(link: &mut Link, cmd: &Cmd) -> RedisResult<Vec<RedisResult<Value>>> {
    match link {
        Link::Standalone(conn) => match cmd.query_async::<Value>(conn).await {
            Ok(answer) => Ok(vec![Ok(answer)]),
            Err(error) if is_refusal(&error) => Ok(vec![Err(error)]),
            Err(error) => Err(error),
        },
        Link::Cluster(conn) => {
            let every_primary = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
            match conn.route_command(cmd.clone(), every_primary).await {
                Ok(Value::Map(answers)) => Ok(answers
                    .into_iter()
                    .map(|(_node, answer)| answer.extract_error())
                    .collect()),
                Ok(answer) => Ok(vec![answer.extract_error()]),
                Err(error) if is_refusal(&error) => Ok(vec![Err(error)]),
                Err(error) => Err(error),
            }
        }
    }
}

/// An error reply to a command (unknown or renamed command, no permission), as opposed to
/// a failed connection.
fn is_refusal(error: &RedisError) -> bool {
    !(error.is_io_error() || error.is_connection_dropped() || error.is_unrecoverable_error())
}

/// A `major.minor.patch` version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Version {
    major: u32,
    minor: u32,
    patch: u32,
}

impl Version {
    const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    /// `7.0.15`; a missing part counts as 0, anything after a part's digits is ignored
    /// (`7.2.4-rc1`).
    fn parse(text: &str) -> Option<Self> {
        let mut parts = text.trim().split('.').map(|part| {
            let digits = part
                .find(|c: char| !c.is_ascii_digit())
                .unwrap_or(part.len());
            part[..digits].parse::<u32>().ok()
        });
        let major = parts.next()??;
        let minor = parts.next().flatten().unwrap_or(0);
        let patch = parts.next().flatten().unwrap_or(0);
        Some(Self::new(major, minor, patch))
    }
}

/// What `INFO server` says of the version: the Redis version the server speaks (Valkey
/// reports the one it is compatible with, 7.2.4) and, for Valkey, its own.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ServerVersion {
    version: Version,
    redis: String,
    valkey: Option<String>,
}

impl ServerVersion {
    fn from_info(info: &str) -> Option<Self> {
        let field = |name: &str| {
            info.lines().find_map(|line| {
                let (key, value) = line.split_once(':')?;
                (key == name).then(|| value.trim().to_owned())
            })
        };
        let redis = field("redis_version")?;
        Some(Self {
            version: Version::parse(&redis)?,
            redis,
            valkey: field("valkey_version"),
        })
    }
}

impl fmt::Display for ServerVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.valkey {
            Some(valkey) => write!(f, "Valkey {valkey} (redis_version {})", self.redis),
            None => write!(f, "Redis {}", self.redis),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_info_server() {
        let redis = "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n";
        let read = ServerVersion::from_info(redis).unwrap();
        assert_eq!(read.version, Version::new(7, 0, 15));
        assert_eq!(read.to_string(), "Redis 7.0.15");

        let valkey =
            "# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n";
        let read = ServerVersion::from_info(valkey).unwrap();
        assert_eq!(read.version, Version::new(7, 2, 4));
        assert_eq!(read.to_string(), "Valkey 8.0.1 (redis_version 7.2.4)");

        assert_eq!(ServerVersion::from_info("# Server\r\nos:Linux\r\n"), None);
    }

    #[test]
    fn versions_compare_by_number() {
        assert_eq!(Version::parse("6"), Some(Version::new(6, 0, 0)));
        assert_eq!(Version::parse("7.2.4-rc1"), Some(Version::new(7, 2, 4)));
        assert_eq!(Version::parse("x.1"), None);
        assert!(Version::parse("5.0.14").unwrap() < OLDEST);
        assert!(Version::parse("6.0.0").unwrap() >= OLDEST);
        assert!(Version::parse("6.2.14").unwrap() < SET_NX_GET);
        assert!(Version::parse("10.0.0").unwrap() >= SET_NX_GET);
    }
}
