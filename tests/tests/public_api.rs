//! The public API of every published crate, against the snapshot committed beside it
//! (`<crate>/public-api.txt`, one line per public item, sorted), and one path per public
//! item.
//!
//! The API is read from rustdoc's JSON output, which the stable toolchain writes when told
//! it may use unstable options (`RUSTC_BOOTSTRAP=1`). It is built into a target directory
//! of its own, `target/public-api`, so that it never waits for the build lock of the
//! `cargo test` running it, and only the documented crates are rebuilt after a change.
//!
//! After a deliberate change to a crate's surface, write the new snapshots with
//! `IDEM_UPDATE_PUBLIC_API=1 cargo test -p idem-tests --test public_api` and commit them
//! with the change, so that the review sees it. The lines are rendered from what the
//! toolchain's rustdoc writes, so a new toolchain may ask for the snapshots to be written
//! again, without any change to the crates.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use public_api::PublicApi;

/// The published crates: package name, library name.
const CRATES: [(&str, &str); 6] = [
    ("idem-core", "idem_core"),
    ("idem-client", "idem_client"),
    ("idem-redis", "idem_redis"),
    ("idem-sqlx", "idem_sqlx"),
    ("idem-axum", "idem_axum"),
    ("idem-macros", "idem_macros"),
];

const UPDATE: &str = "IDEM_UPDATE_PUBLIC_API";

#[test]
fn every_published_crate_has_its_committed_public_api_with_one_path_per_item() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the workspace holds the tests");
    let update = std::env::var_os(UPDATE).is_some_and(|value| value == "1");
    let mut failures = Vec::new();
    for (package, library) in CRATES {
        let api = public_api(root, package, library);
        failures.extend(items_at_two_paths(package, &api));
        let lines = api.to_string();
        let snapshot = root.join(package).join("public-api.txt");
        if update {
            std::fs::write(&snapshot, &lines).expect("the snapshot is written");
            continue;
        }
        let committed = std::fs::read_to_string(&snapshot).unwrap_or_default();
        if committed != lines {
            failures.push(format!(
                "the public API of {package} is not {}:\n{}",
                snapshot.display(),
                difference(&committed, &lines)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{}\n\nIf the change to the surface is meant, write the snapshots with\n    \
         {UPDATE}=1 cargo test -p idem-tests --test public_api\nand commit them.",
        failures.join("\n\n")
    );
}

/// The public API of `package`, from rustdoc's JSON output; the implementations of the
/// standard library's blanket traits (`From<T> for T`, `Borrow<T>`, ...) are left out, as
/// every type has them.
fn public_api(root: &Path, package: &str, library: &str) -> PublicApi {
    let target = root.join("target").join("public-api");
    let built = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()))
        .current_dir(root)
        .env("RUSTC_BOOTSTRAP", "1")
        .args([
            "rustdoc",
            "--quiet",
            "--lib",
            "--all-features",
            "-p",
            package,
        ])
        .arg("--target-dir")
        .arg(&target)
        .args(["--", "-Z", "unstable-options", "--output-format", "json"])
        .status()
        .expect("cargo runs");
    assert!(built.success(), "rustdoc's JSON output of {package}");
    let json: PathBuf = target.join("doc").join(format!("{library}.json"));
    public_api::Builder::from_rustdoc_json(json)
        .omit_blanket_impls(true)
        .build()
        .unwrap_or_else(|error| panic!("the public API of {package}: {error}"))
}

/// The items of `package` that are public at more than one path: each names one item,
/// and a reader should find it at one place.
fn items_at_two_paths(package: &str, api: &PublicApi) -> Option<String> {
    let modules: HashSet<_> = api
        .items()
        .filter(|item| item.to_string().starts_with("pub mod "))
        .map(|item| item.id())
        .collect();
    let mut paths: HashMap<_, BTreeSet<String>> = HashMap::new();
    for item in api.items() {
        // Members of a type or a trait repeat with it; the type itself is what counts.
        if item
            .parent_id()
            .is_none_or(|parent| modules.contains(&parent))
        {
            paths.entry(item.id()).or_default().insert(item.to_string());
        }
    }
    let mut twice: Vec<String> = paths
        .into_values()
        .filter(|lines| lines.len() > 1)
        .map(|lines| lines.into_iter().collect::<Vec<_>>().join("\n    = "))
        .collect();
    twice.sort();
    (!twice.is_empty()).then(|| {
        format!(
            "{package} makes items public at more than one path:\n    {}",
            twice.join("\n    ")
        )
    })
}

/// The lines only the committed snapshot has (`-`) and only the code has (`+`).
fn difference(committed: &str, current: &str) -> String {
    let (committed, current): (BTreeSet<&str>, BTreeSet<&str>) =
        (committed.lines().collect(), current.lines().collect());
    let gone = committed
        .difference(&current)
        .map(|line| format!("- {line}"));
    let new = current
        .difference(&committed)
        .map(|line| format!("+ {line}"));
    gone.chain(new).collect::<Vec<_>>().join("\n")
}
