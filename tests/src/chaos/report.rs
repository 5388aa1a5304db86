//! What a chaos run came to: executions per operation from the ledgers, each double
//! execution put down to its cause, statuses, latency, records kept through faults.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::{self, Write as _};
use std::time::Duration;

use super::deployment::FaultEvent;
use super::workload::{Driver, Exchange, Kind, Outcome, Verdict};
use super::{Chaos, Event, Fault, LedgerFile, Route, StoreSetup};

/// What a double execution is put down to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cause {
    /// The instance that committed first was killed before its response left, so before
    /// or while the guard stored it: the window a record kept apart from the data cannot
    /// close. Never the cause on a route whose record commits with its side effect
    /// ([`StoreSetup::commits_with_record`]): there the window is closed, and a double
    /// execution after a kill is unexplained.
    InstanceKill,
    /// Between the two commits (or shortly before the first, after its guard's key was
    /// written) a fault made the store forget: a restart without persistence, a
    /// failover.
    DataLoss(Fault),
    /// Neither: idem let a duplicate through.
    Unexplained,
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::InstanceKill => f.write_str("instance killed after its commit"),
            Self::DataLoss(fault) => write!(f, "data lost in {fault}"),
            Self::Unexplained => f.write_str("unexplained"),
        }
    }
}

/// Latency percentiles of answered requests.
#[derive(Debug, Clone)]
pub struct Latency {
    /// Which requests.
    pub label: String,
    /// How many.
    pub count: usize,
    /// 50th, 90th, 99th, 99.9th percentile and the maximum.
    pub percentiles: [Duration; 5],
}

impl Latency {
    fn of(label: &str, mut took: Vec<Duration>) -> Self {
        took.sort_unstable();
        let at = |share: f64| {
            if took.is_empty() {
                return Duration::ZERO;
            }
            let rank = (share * took.len() as f64).ceil() as usize;
            took[rank.clamp(1, took.len()) - 1]
        };
        Self {
            label: label.to_owned(),
            count: took.len(),
            percentiles: [at(0.5), at(0.9), at(0.99), at(0.999), at(1.0)],
        }
    }
}

/// The figures of one route.
#[derive(Debug, Clone, Default)]
pub struct RouteFigures {
    /// Operations started.
    pub operations: u64,
    /// Operations committed exactly once.
    pub once: u64,
    /// Operations never committed: refused throughout (a key taken by an attempt whose
    /// answer was lost), or given up.
    pub never: u64,
    /// Operations committed more than once, by cause.
    pub doubles: BTreeMap<Cause, u64>,
    /// Operations with a send that got no final answer within its bounds.
    pub gave_up: u64,
    /// Idempotent operations whose successes differed without a double execution that
    /// explains it: a replay that was not the first response.
    pub differing: u64,
    /// Completed operations sent again after a fault that could lose data: records kept,
    /// lost, unsettled.
    pub checks: [u64; 3],
    /// Answers by status (`201`, `201 replayed`, `409`, …, `no answer`).
    pub statuses: BTreeMap<String, u64>,
    /// Handlers of killed instances that had committed but whose response had not left.
    pub cut_after_commit: u64,
}

impl RouteFigures {
    /// Operations committed more than once.
    pub fn doubles(&self) -> u64 {
        self.doubles.values().sum()
    }
}

/// The figures of a chaos run.
#[derive(Debug, Clone)]
pub struct Report {
    /// The set-up.
    pub setup: String,
    /// Whether the run's guarantees are asserted (the set-ups that lose nothing they
    /// acknowledged: durable Redis, PostgreSQL).
    pub asserted: bool,
    /// Requests sent, every retry counted.
    pub requests: u64,
    /// Server instances.
    pub instances: usize,
    /// Per route.
    pub routes: BTreeMap<Route, RouteFigures>,
    /// Latency of answered requests: per route (`form page` for `GET /form`), and of all.
    pub latency: Vec<Latency>,
    /// How long an answer may take, per route (`form page` for `GET /form`): the store's
    /// timeout + 100 ms, or with replica acks what [`StoreSetup::answer_bound`] says.
    pub bounds: BTreeMap<String, Duration>,
    /// Answers that took longer than their bound.
    pub over_bound: u64,
    /// Requests unanswered (connection failed, or no answer in 10 s) while their instance
    /// was down (killed, not yet started again).
    pub unanswered_while_down: u64,
    /// Requests unanswered while their instance was up.
    pub unanswered_while_up: u64,
    /// Each of those, in words: what, to which instance, how it ended, and when it was
    /// sent against the nearest fault.
    pub unanswered_while_up_notes: Vec<String>,
    /// Tickets of the lock route whose critical sections overlapped in time.
    pub lock_overlaps: u64,
    /// Holders that found their lock gone before its lease ended.
    pub lost_locks: u64,
    /// Handlers of killed instances that had run but not committed.
    pub cut_before_commit: u64,
    /// Handlers of killed instances that had committed but whose response had not left.
    pub cut_after_commit: u64,
    /// The faults, as injected.
    pub faults: Vec<FaultEvent>,
    /// Ledger lines that could not be read.
    pub unreadable_lines: usize,
    /// How long the run took, start to end.
    pub took: Duration,
}

/// The ledgers' events of one operation.
#[derive(Debug, Default)]
struct Executions {
    /// Commits: when, in which ledger.
    commits: Vec<(u64, usize)>,
}

impl Report {
    pub(super) fn new(
        chaos: &Chaos,
        driver: &Driver,
        faults: &[FaultEvent],
        ledgers: &[LedgerFile],
        took: Duration,
    ) -> Self {
        let killed: Vec<bool> = ledgers
            .iter()
            .map(|ledger| {
                faults
                    .iter()
                    .any(|fault| fault.killed.is_some_and(|(_, pid)| pid == ledger.pid))
            })
            .collect();
        let mut executions: HashMap<(Route, &str), Executions> = HashMap::new();
        let mut answered: HashSet<(usize, Route, &str)> = HashSet::new();
        let mut report = Self {
            setup: chaos.setup.to_string(),
            asserted: chaos.setup.asserted(),
            requests: driver.sent(),
            instances: chaos.instances,
            routes: Route::ALL
                .into_iter()
                .map(|route| (route, RouteFigures::default()))
                .collect(),
            latency: Vec::new(),
            bounds: BTreeMap::new(),
            over_bound: 0,
            unanswered_while_down: 0,
            unanswered_while_up: 0,
            unanswered_while_up_notes: Vec::new(),
            lock_overlaps: 0,
            lost_locks: 0,
            cut_before_commit: 0,
            cut_after_commit: 0,
            faults: faults.to_vec(),
            unreadable_lines: ledgers.iter().map(|ledger| ledger.unreadable).sum(),
            took,
        };
        for (file, ledger) in ledgers.iter().enumerate() {
            for entry in &ledger.entries {
                let key = (entry.route, entry.key.as_str());
                match entry.event {
                    Event::Commit => executions
                        .entry(key)
                        .or_default()
                        .commits
                        .push((entry.at, file)),
                    Event::Answer => {
                        answered.insert((file, entry.route, entry.key.as_str()));
                    }
                    Event::LostLock => report.lost_locks += 1,
                    Event::Run | Event::Free => {}
                }
            }
        }
        report.count_cut_handlers(ledgers, &killed, &answered);
        report.lock_overlaps = lock_overlaps(ledgers);

        let losing = |fault: Fault| {
            fault == Fault::Failover
                || (fault == Fault::RedisRestart && chaos.setup == StoreSetup::Volatile)
        };
        // A guard's key is written before its handler commits, at most a store timeout
        // and the handler's work earlier: a fault that began that long before the
        // first commit may have taken the key with it.
        let guard_to_commit = u64::try_from((chaos.store_timeout * 2).as_nanos()).unwrap_or(0);
        let mut explained = HashSet::new();
        for operation in driver.operations().iter() {
            let figures = report
                .routes
                .get_mut(&operation.route)
                .expect("every route");
            figures.operations += 1;
            figures.gave_up += u64::from(operation.gave_up);
            let commits = executions
                .get_mut(&(operation.route, operation.key.as_str()))
                .map(|executions| {
                    executions.commits.sort_unstable();
                    executions.commits.as_slice()
                })
                .unwrap_or_default();
            match commits {
                [] => figures.never += 1,
                [_] => figures.once += 1,
                [(first, file), (second, _), ..] => {
                    let cause = if killed[*file]
                        && !answered.contains(&(*file, operation.route, operation.key.as_str()))
                        && !chaos.setup.commits_with_record(operation.route)
                    {
                        Cause::InstanceKill
                    } else if let Some(fault) = faults.iter().find(|fault| {
                        losing(fault.fault)
                            && (first.saturating_sub(guard_to_commit)..=*second)
                                .contains(&fault.started)
                    }) {
                        Cause::DataLoss(fault.fault)
                    } else {
                        Cause::Unexplained
                    };
                    if cause != Cause::Unexplained {
                        explained.insert(operation.key.as_str().to_owned());
                    }
                    *figures.doubles.entry(cause).or_default() += 1;
                }
            }
            if operation.differing_answers && !explained.contains(&operation.key) {
                figures.differing += 1;
            }
        }
        for check in driver.checks().iter() {
            let figures = report.routes.get_mut(&check.route).expect("every route");
            let slot = match check.verdict {
                Verdict::Kept => 0,
                Verdict::Lost => 1,
                Verdict::Unsettled => 2,
            };
            figures.checks[slot] += 1;
        }
        report.count_exchanges(&driver.exchanges(), chaos);
        report
    }

    /// Handlers of killed instances that ran and did not see their response leave.
    fn count_cut_handlers(
        &mut self,
        ledgers: &[LedgerFile],
        killed: &[bool],
        answered: &HashSet<(usize, Route, &str)>,
    ) {
        for (file, ledger) in ledgers.iter().enumerate().filter(|(file, _)| killed[*file]) {
            let mut ran = HashSet::new();
            let mut committed = HashSet::new();
            for entry in &ledger.entries {
                let key = (entry.route, entry.key.as_str());
                match entry.event {
                    Event::Run => {
                        ran.insert(key);
                    }
                    Event::Commit => {
                        committed.insert(key);
                    }
                    _ => {}
                }
            }
            for (route, key) in ran {
                if answered.contains(&(file, route, key)) {
                    continue;
                }
                if committed.contains(&(route, key)) {
                    self.cut_after_commit += 1;
                    let figures = self.routes.get_mut(&route).expect("every route");
                    figures.cut_after_commit += 1;
                } else {
                    self.cut_before_commit += 1;
                }
            }
        }
    }

    fn count_exchanges(&mut self, exchanges: &[Exchange], chaos: &Chaos) {
        let down: Vec<(usize, u64, u64)> = self
            .faults
            .iter()
            .filter_map(|fault| {
                fault
                    .killed
                    .map(|(index, _)| (index, fault.started, fault.ended))
            })
            .collect();
        let mut took: BTreeMap<String, Vec<Duration>> = BTreeMap::new();
        for exchange in exchanges {
            let label = match exchange.outcome {
                Outcome::Answered { status, replayed } => {
                    let name = if exchange.kind == Kind::Page {
                        "form page".to_owned()
                    } else {
                        exchange.route.to_string()
                    };
                    let bound = chaos.setup.answer_bound(
                        exchange.route,
                        exchange.kind == Kind::Page,
                        chaos.store_timeout,
                    );
                    self.over_bound += u64::from(exchange.took > bound);
                    self.bounds.insert(name.clone(), bound);
                    took.entry(name).or_default().push(exchange.took);
                    if replayed {
                        format!("{} replayed", status.as_u16())
                    } else {
                        status.as_u16().to_string()
                    }
                }
                Outcome::Failed | Outcome::TimedOut => {
                    let ended = exchange.sent_at
                        + u64::try_from(exchange.took.as_nanos()).unwrap_or(u64::MAX);
                    let instance_down = down.iter().any(|(index, from, to)| {
                        *index == exchange.instance && exchange.sent_at <= *to && ended >= *from
                    });
                    if instance_down {
                        self.unanswered_while_down += 1;
                    } else {
                        self.unanswered_while_up += 1;
                        let note = self.unanswered_note(exchange);
                        self.unanswered_while_up_notes.push(note);
                    }
                    "no answer".to_owned()
                }
            };
            let figures = self.routes.get_mut(&exchange.route).expect("every route");
            *figures.statuses.entry(label).or_default() += 1;
        }
        let all = took.values().flatten().copied().collect();
        self.latency = took
            .into_iter()
            .map(|(label, took)| Latency::of(&label, took))
            .collect();
        self.latency.push(Latency::of("all", all));
    }

    /// `exchange`, unanswered while its instance was up, in words.
    fn unanswered_note(&self, exchange: &Exchange) -> String {
        let seconds = |from: u64, to: u64| (to as f64 - from as f64) / 1e9;
        let nearest = self
            .faults
            .iter()
            .min_by_key(|fault| fault.started.abs_diff(exchange.sent_at))
            .map(|fault| {
                format!(
                    "sent {:+.3} s from the start of {} (which lasted {:.3} s)",
                    seconds(fault.started, exchange.sent_at),
                    fault.fault,
                    seconds(fault.started, fault.ended)
                )
            })
            .unwrap_or_default();
        format!(
            "{} {:?} to instance {}: {:?} after {:.1} ms, {nearest}",
            exchange.route,
            exchange.kind,
            exchange.instance,
            exchange.outcome,
            exchange.took.as_secs_f64() * 1000.0
        )
    }

    /// Operations committed more than once, every cause.
    pub fn doubles(&self) -> u64 {
        self.routes.values().map(RouteFigures::doubles).sum()
    }

    /// Operations committed more than once for `cause`.
    pub fn doubles_by(&self, cause: Cause) -> u64 {
        self.routes
            .values()
            .map(|figures| figures.doubles.get(&cause).copied().unwrap_or(0))
            .sum()
    }

    /// Completed records sent again after a fault and found gone.
    pub fn lost_records(&self) -> u64 {
        self.routes.values().map(|figures| figures.checks[1]).sum()
    }

    /// What breaks the guarantees asserted on the durable set-ups (Redis, PostgreSQL), in
    /// words; empty when they held: no double execution but those of a killed instance's
    /// commit window (none on a route whose record commits with its side effect); every
    /// request answered within the bound unless its instance was down; every record
    /// completed before a store restart still there; every operation settled; the lock
    /// exclusive.
    pub fn violations(&self) -> Vec<String> {
        let mut violations = Vec::new();
        let mut check = |broken: bool, what: String| {
            if broken {
                violations.push(what);
            }
        };
        for (route, figures) in &self.routes {
            let unexplained = figures
                .doubles
                .get(&Cause::Unexplained)
                .copied()
                .unwrap_or(0);
            check(
                unexplained > 0,
                format!("{route}: {unexplained} unexplained double executions"),
            );
            for (cause, count) in &figures.doubles {
                check(
                    matches!(cause, Cause::DataLoss(_)),
                    format!("{route}: {count} double executions by {cause}"),
                );
            }
            check(
                figures.differing > 0,
                format!(
                    "{route}: {} replays differed from the first answer",
                    figures.differing
                ),
            );
            check(
                figures.gave_up > 0,
                format!(
                    "{route}: {} operations never got a final answer",
                    figures.gave_up
                ),
            );
            let [_, lost, unsettled] = figures.checks;
            check(lost > 0, format!("{route}: {lost} completed records lost"));
            check(
                unsettled > 0,
                format!("{route}: {unsettled} records could not be checked"),
            );
        }
        violations.extend(self.timing_violations());
        let mut check = |broken: bool, what: String| {
            if broken {
                violations.push(what);
            }
        };
        check(
            self.lock_overlaps > 0,
            format!("{} tickets held by two at once", self.lock_overlaps),
        );
        check(
            self.lost_locks > 0,
            format!("{} locks lost", self.lost_locks),
        );
        check(
            self.unreadable_lines > 0,
            format!("{} unreadable ledger lines", self.unreadable_lines),
        );
        violations
    }

    /// What breaks the bound on answers, the one guarantee asserted on every set-up
    /// with replica acks too (where a failover may lose what the others assert): every
    /// request answered within its route's [bound](Self::bounds) unless its instance was
    /// down.
    pub fn timing_violations(&self) -> Vec<String> {
        let mut violations = Vec::new();
        if self.over_bound > 0 {
            violations.push(format!(
                "{} answers took longer than their bound ({})",
                self.over_bound,
                self.bounds_in_words()
            ));
        }
        if self.unanswered_while_up > 0 {
            violations.push(format!(
                "{} requests unanswered while their instance was up",
                self.unanswered_while_up
            ));
        }
        violations
    }

    /// The bounds: one figure when every route has the same, else each route's.
    fn bounds_in_words(&self) -> String {
        let mut figures: Vec<Duration> = self.bounds.values().copied().collect();
        figures.dedup();
        match figures.as_slice() {
            [one] => millis(*one),
            _ => self
                .bounds
                .iter()
                .map(|(label, bound)| format!("{label} {}", millis(*bound)))
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// Asserts what a short run of `chaos` (as the test suite runs it) must show: every
    /// fault injected, at least the requests asked for sent, records checked after the
    /// faults that could lose data, and no [violation](Self::violations).
    ///
    /// # Panics
    ///
    /// When one of them does not hold, saying which.
    pub fn assert_held(&self, chaos: &Chaos) {
        assert_eq!(
            self.faults.len(),
            chaos.faults.len(),
            "every fault was injected"
        );
        assert!(
            self.requests >= chaos.requests,
            "{} requests",
            self.requests
        );
        let checked: u64 = self
            .routes
            .values()
            .map(|route| route.checks.iter().sum::<u64>())
            .sum();
        let checks_due = chaos.faults.iter().any(|fault| fault.could_lose_data());
        assert!(
            checked > 0 || !checks_due,
            "records were checked after the faults that could lose them"
        );
        let violations = self.violations();
        assert!(violations.is_empty(), "{violations:#?}");
    }

    /// The report as Markdown: a heading, the tables, the notes.
    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let operations: u64 = self.routes.values().map(|figures| figures.operations).sum();
        let _ = writeln!(out, "### {}\n", self.setup);
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|fault| fault.fault.to_string())
            .collect();
        let _ = writeln!(
            out,
            "{} requests in {} operations on {} instances, {:.0} s; faults in order: {}.\n",
            self.requests,
            operations,
            self.instances,
            self.took.as_secs_f64(),
            if faults.is_empty() {
                "none".to_owned()
            } else {
                faults.join(", ")
            }
        );
        out.push_str("| route | operations | executed once | never executed | executed twice or more | of which: killed after commit / data lost / unexplained | records checked after a fault: kept / lost / unsettled |\n");
        out.push_str("|---|---|---|---|---|---|---|\n");
        let mut total = RouteFigures::default();
        for (route, figures) in &self.routes {
            self.route_row(&mut out, &route.to_string(), figures);
            total.operations += figures.operations;
            total.once += figures.once;
            total.never += figures.never;
            for (cause, count) in &figures.doubles {
                *total.doubles.entry(*cause).or_default() += count;
            }
            for (sum, part) in total.checks.iter_mut().zip(figures.checks) {
                *sum += part;
            }
        }
        self.route_row(&mut out, "**all**", &total);

        let columns = ["200", "201", "201 replayed", "409", "503", "no answer"];
        let _ = writeln!(out, "\n| answers | {} | other |", columns.join(" | "));
        let _ = writeln!(out, "|---|{}---|", "---|".repeat(columns.len()));
        for (route, figures) in &self.routes {
            let mut rest = figures.statuses.clone();
            let cells: Vec<String> = columns
                .iter()
                .map(|column| rest.remove(*column).unwrap_or(0).to_string())
                .collect();
            let other: Vec<String> = rest
                .iter()
                .map(|(status, count)| format!("{status}: {count}"))
                .collect();
            let _ = writeln!(
                out,
                "| {route} | {} | {} |",
                cells.join(" | "),
                other.join(", ")
            );
        }

        out.push_str(
            "\n| latency of answered requests | requests | p50 | p90 | p99 | p99.9 | max |\n",
        );
        out.push_str("|---|---|---|---|---|---|---|\n");
        for latency in &self.latency {
            let cells: Vec<String> = latency
                .percentiles
                .iter()
                .map(|took| millis(*took))
                .collect();
            let _ = writeln!(
                out,
                "| {} | {} | {} |",
                latency.label,
                latency.count,
                cells.join(" | ")
            );
        }

        let _ = writeln!(
            out,
            "\n- Answers later than their bound ({}): {}. Requests unanswered: {} while their instance was down, {} while it was up.",
            self.bounds_in_words(),
            self.over_bound,
            self.unanswered_while_down,
            self.unanswered_while_up
        );
        for note in &self.unanswered_while_up_notes {
            let _ = writeln!(out, "  - Unanswered on a live instance: {note}.");
        }
        let _ = writeln!(
            out,
            "- Lock route: {} tickets with overlapping holders, {} locks lost before their lease ended.",
            self.lock_overlaps, self.lost_locks
        );
        if self.cut_before_commit + self.cut_after_commit > 0 {
            let after: Vec<String> = self
                .routes
                .iter()
                .filter(|(_, figures)| figures.cut_after_commit > 0)
                .map(|(route, figures)| format!("{route} {}", figures.cut_after_commit))
                .collect();
            let _ = writeln!(
                out,
                "- Handlers cut by a kill: {} before their commit, {} after it (before their response left){}.",
                self.cut_before_commit,
                self.cut_after_commit,
                if after.is_empty() {
                    String::new()
                } else {
                    format!(": {}", after.join(", "))
                }
            );
        }
        for fault in &self.faults {
            let lasted = fault.ended.saturating_sub(fault.started);
            let _ = write!(
                out,
                "- {}: down or degraded {:.1} s",
                fault.fault,
                lasted as f64 / 1e9
            );
            if !fault.note.is_empty() {
                let _ = write!(out, "; {}", fault.note);
            }
            out.push_str(".\n");
        }
        if self.unreadable_lines > 0 {
            let _ = writeln!(out, "- Unreadable ledger lines: {}.", self.unreadable_lines);
        }
        out
    }

    fn route_row(&self, out: &mut String, label: &str, figures: &RouteFigures) {
        let by = |cause: Cause| figures.doubles.get(&cause).copied().unwrap_or(0);
        let lost: u64 = figures
            .doubles
            .iter()
            .filter(|(cause, _)| matches!(cause, Cause::DataLoss(_)))
            .map(|(_, count)| count)
            .sum();
        let [kept, gone, unsettled] = figures.checks;
        let _ = writeln!(
            out,
            "| {label} | {} | {} | {} | {} | {} / {} / {} | {kept} / {gone} / {unsettled} |",
            figures.operations,
            figures.once,
            figures.never,
            figures.doubles(),
            by(Cause::InstanceKill),
            lost,
            by(Cause::Unexplained),
        );
    }
}

/// Tickets of the lock route whose critical sections (from `run`, noted once the lock was
/// held, to `free`, noted before it is released) overlapped; a section cut by a kill has
/// no end and is left out.
fn lock_overlaps(ledgers: &[LedgerFile]) -> u64 {
    let mut sections: HashMap<&str, Vec<(u64, u64)>> = HashMap::new();
    for ledger in ledgers {
        let mut open: HashMap<&str, Vec<u64>> = HashMap::new();
        for entry in ledger
            .entries
            .iter()
            .filter(|entry| entry.route == Route::Withdraw)
        {
            match entry.event {
                Event::Run => open.entry(&entry.key).or_default().push(entry.at),
                Event::Free => {
                    if let Some(start) = open
                        .get_mut(entry.key.as_str())
                        .and_then(|starts| (!starts.is_empty()).then(|| starts.remove(0)))
                    {
                        sections
                            .entry(&entry.key)
                            .or_default()
                            .push((start, entry.at));
                    }
                }
                _ => {}
            }
        }
    }
    let mut overlaps = 0;
    for held in sections.values_mut() {
        held.sort_unstable();
        let overlapping = held.windows(2).any(|pair| pair[1].0 < pair[0].1);
        overlaps += u64::from(overlapping);
    }
    overlaps
}

fn millis(took: Duration) -> String {
    format!("{:.1} ms", took.as_secs_f64() * 1000.0)
}
