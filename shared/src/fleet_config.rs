//! `fleet.toml`: the one file every binary reads (`--config <path>`, env `FLEET_CONFIG`), because
//! the publisher, the nodes and the gateways must agree on the namespaces and on the fleet's
//! shared settings.
//!
//! ```toml
//! [default]                       # the namespaces ([`crate::namespaces`])
//! model = "pixels"
//! [namespaces.scores]
//! model = "json"
//!
//! [fleet]                         # read by every binary that has the setting
//! kafka_bootstrap = "kafka:9092"
//! kafka_topic = "canvas-events"
//!
//! [publisher]                     # core-publisher's own settings
//! max_channels = 50000
//! [node]                          # ws-node's
//! [gateway]                       # the gateway's
//! nodes = ["ws-1=http://ws-1:8081", "ws-2=http://ws-2:8081"]
//! ```
//!
//! A key of a settings table is the binary's environment variable, in upper or lower case; a
//! value is a string, a number, a boolean, or an array of them (joined with `,`). Precedence:
//! command-line flag, then environment variable, then the file (the binary's own table before
//! `[fleet]`), then the built-in default. [`load`] puts the file's settings into the process's
//! environment where the variable is unset, before clap parses (at start-up, while the process
//! has one thread), so clap's environment fallback reads them.
//!
//! Secrets ([`SECRETS`], and any setting whose value `--help` hides) stay in the environment: the
//! file may not name them. Each binary checks `[fleet]` (its keys must be [`FLEET_SETTINGS`]) and
//! its own table (its keys must be its settings); the other binaries' tables are theirs to check.
//! Every problem is reported at once, naming the file and line.
//!
//! Settings renamed from canvas words to channel words keep their old names ([`Renamed`]), in the
//! environment and in the file, with a deprecation note in `--check-config` and in the log.

use crate::canvas::CanvasDims;
use crate::namespaces::{Namespaces, NamespacesSpec};
use clap::parser::ValueSource;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use toml::Spanned;

/// The environment variable naming the file (the flag is `--config`).
pub const ENV: &str = "FLEET_CONFIG";

/// The settings tables: `[fleet]` and one per binary.
pub const SETTINGS_TABLES: [&str; 4] = ["fleet", "publisher", "node", "gateway"];

/// What `[fleet]` may set: settings with one meaning in every binary that has them. Each binary
/// takes those it has (the gateway, for one, has no `KAFKA_TOPIC`; with `KAFKA_BOOTSTRAP` it
/// elects its leader through Kafka).
pub const FLEET_SETTINGS: &[&str] = &[
    "KAFKA_BOOTSTRAP",
    "KAFKA_TOPIC",
    "SNAPSHOT_TOPIC",
    "CONTROL_TOPIC",
    "TOPIC_PARTITIONS",
    "TOPIC_REPLICATION_FACTOR",
    "CANVAS_WIDTH",
    "CANVAS_HEIGHT",
    "CLIENT_TOKEN_RS256_PUBLIC_KEY_FILE",
    "CLIENT_TOKEN_JWKS_FILE",
    "CLIENT_TOKEN_AUDIENCE",
    "CLIENT_TOKEN_ISSUER",
    "HEADER_READ_TIMEOUT_MS",
    "BODY_READ_TIMEOUT_MS",
    "MAX_CONNECTIONS",
];

/// Settings never read from the file, in any table: secrets stay in the environment.
pub const SECRETS: &[&str] = &["ADMIN_TOKEN", "CLIENT_TOKEN_HS256_SECRET"];

/// A setting's new name and the old one still accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renamed {
    pub old: &'static str,
    pub new: &'static str,
}

/// The binary that reads the file: its name, its table and its settings.
#[derive(Debug, Clone)]
pub struct Reader {
    /// `core-publisher`, `ws-node` or `gateway`.
    pub binary: &'static str,
    /// Its table: `publisher`, `node` or `gateway`.
    pub table: &'static str,
    /// The environment variables of its settings, secrets excepted.
    pub settings: BTreeSet<String>,
    /// [`SECRETS`] and its settings whose values `--help` hides.
    pub secrets: BTreeSet<String>,
    pub renamed: &'static [Renamed],
}

impl Reader {
    /// The reader whose settings are `command`'s arguments with an environment variable.
    pub fn new(binary: &'static str, table: &'static str, command: &clap::Command, renamed: &'static [Renamed]) -> Self {
        let mut secrets: BTreeSet<String> = SECRETS.iter().map(|s| (*s).to_owned()).collect();
        let mut settings = BTreeSet::new();
        for arg in command.get_arguments() {
            let Some(env) = arg.get_env().and_then(OsStr::to_str) else { continue };
            if arg.is_hide_env_values_set() {
                secrets.insert(env.to_owned());
            } else if env != ENV {
                settings.insert(env.to_owned());
            }
        }
        settings.retain(|s| !secrets.contains(s));
        Self { binary, table, settings, secrets, renamed }
    }
}

/// One setting the file gives: its value and where it is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub value: String,
    /// `fleet.toml:12 [fleet]`.
    pub origin: String,
}

/// What the file says to one binary (empty without a file).
#[derive(Debug, Clone, Default)]
pub struct FleetFile {
    pub path: Option<PathBuf>,
    pub namespaces: NamespacesSpec,
    /// The binary's settings the file sets: `[fleet]`'s, then its own table's over them.
    pub settings: BTreeMap<String, Setting>,
    /// Every problem of the file, each naming the file and line.
    pub problems: Vec<String>,
    /// Deprecated names used (in the environment or the file).
    pub notes: Vec<String>,
    /// The settings the file decided (no flag or environment variable set them).
    pub applied: Vec<String>,
}

/// The process environment, or a map in tests.
pub trait Environment {
    fn get(&self, name: &str) -> Option<OsString>;
    fn set(&mut self, name: &str, value: &OsStr);
}

/// The process environment: [`FleetFile::apply`] on it must run while the process has one thread.
pub struct ProcessEnv;

impl Environment for ProcessEnv {
    fn get(&self, name: &str) -> Option<OsString> {
        std::env::var_os(name)
    }
    fn set(&mut self, name: &str, value: &OsStr) {
        std::env::set_var(name, value);
    }
}

impl Environment for BTreeMap<String, OsString> {
    fn get(&self, name: &str) -> Option<OsString> {
        BTreeMap::get(self, name).cloned()
    }
    fn set(&mut self, name: &str, value: &OsStr) {
        self.insert(name.to_owned(), value.to_owned());
    }
}

/// The file `--config <path>` or `--config=<path>` in `args` (the program's name excluded) names,
/// else `env` (`FLEET_CONFIG`); none when empty.
pub fn path_from(args: impl IntoIterator<Item = OsString>, env: Option<OsString>) -> Option<PathBuf> {
    let mut found = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "--" {
            break;
        } else if arg == "--config" {
            found = args.next();
        } else if let Some(path) = arg.to_str().and_then(|a| a.strip_prefix("--config=")) {
            found = Some(path.into());
        }
    }
    found.or(env).filter(|p| !p.is_empty()).map(PathBuf::from)
}

/// A file's settings table, each key and value with its place.
type Table = BTreeMap<Spanned<String>, Spanned<toml::Value>>;

impl FleetFile {
    /// Reads and checks the file at `path` for `reader`.
    pub fn read(path: &Path, reader: &Reader) -> Self {
        match std::fs::read_to_string(path) {
            Ok(text) => Self::parse(&text, path, reader),
            Err(e) => Self {
                path: Some(path.to_owned()),
                problems: vec![format!("{}: cannot read the fleet file (--config, {ENV}): {e}", path.display())],
                ..Self::default()
            },
        }
    }

    /// Checks `text`, the file at `path`, for `reader`.
    pub fn parse(text: &str, path: &Path, reader: &Reader) -> Self {
        let shown = path.display().to_string();
        let mut f = Self { path: Some(path.to_owned()), ..Self::default() };
        let doc: BTreeMap<Spanned<String>, Table> = match toml::from_str(text) {
            Ok(doc) => doc,
            Err(e) => {
                f.problems.push(toml_problem(&shown, text, &e));
                return f;
            }
        };
        // Problems and notes by their place in the file, to be listed in its order.
        let mut found = Found::default();
        let (mut fleet, mut own) = (BTreeMap::new(), BTreeMap::new());
        let mut tables: Vec<_> = doc.iter().collect();
        tables.sort_by_key(|(name, _)| name.span().start);
        for (name, table) in tables {
            match name.get_ref().as_str() {
                "default" | "namespaces" => {}
                t if SETTINGS_TABLES.contains(&t) => {
                    let into = if t == "fleet" { &mut fleet } else { &mut own };
                    settings_table(t, table, reader, (&shown, text), into, &mut found);
                }
                other => found.problems.push((
                    name.span().start,
                    format!(
                        "{shown}:{}: unknown table [{other}] (the tables are [default], [namespaces.<name>], [fleet], [publisher], [node] and [gateway])",
                        line_of(text, name.span().start)
                    ),
                )),
            }
        }
        f.settings = fleet;
        f.settings.append(&mut own);
        match toml::from_str::<NamespacesSpec>(text) {
            Ok(spec) => f.namespaces = spec,
            Err(e) => found.problems.push((e.span().map_or(0, |s| s.start), toml_problem(&shown, text, &e))),
        }
        for (list, into) in [(found.problems, &mut f.problems), (found.notes, &mut f.notes)] {
            let mut list = list;
            list.sort_by_key(|(at, _)| *at);
            into.extend(list.into_iter().map(|(_, p)| p));
        }
        f
    }

    /// Puts the old names of renamed settings under their new ones, then the file's settings,
    /// where `env` does not set them already. Call it before clap parses.
    pub fn apply(&mut self, reader: &Reader, env: &mut dyn Environment) {
        for r in reader.renamed {
            match (env.get(r.old), env.get(r.new)) {
                (Some(old), None) => {
                    env.set(r.new, &old);
                    self.notes.push(format!("{} is deprecated: read as {}; rename it", r.old, r.new));
                }
                (Some(_), Some(_)) => self.notes.push(format!("{} is ignored: {} is set too ({} is its old name)", r.old, r.new, r.old)),
                _ => {}
            }
        }
        for (name, setting) in &self.settings {
            if env.get(name).is_none() {
                env.set(name, setting.value.as_ref());
                self.applied.push(name.clone());
            }
        }
    }

    /// The namespaces, a `pixels` namespace that sets no size getting `dims`.
    ///
    /// # Errors
    /// Every namespace problem.
    pub fn namespaces(&self, dims: CanvasDims) -> Result<Namespaces, Vec<crate::namespaces::SpecError>> {
        Namespaces::resolve(&self.namespaces, dims)
    }

    /// The namespaces, or when they are invalid (refused at start-up) the fleet without a file.
    pub fn namespaces_or_pixels(&self, dims: CanvasDims) -> Namespaces {
        self.namespaces(dims).unwrap_or_else(|_| Namespaces::pixels_only(dims))
    }

    /// Every problem: the file's, then its namespaces'.
    pub fn problems(&self, dims: CanvasDims) -> Vec<String> {
        let mut p = self.problems.clone();
        let shown = self.path.as_ref().map_or_else(|| "namespaces".to_owned(), |p| p.display().to_string());
        if let Err(errors) = self.namespaces(dims) {
            p.extend(errors.iter().map(|e| format!("{shown}: [{}] {}", e.namespace, e.problem)));
        }
        p
    }

    /// What `--check-config` prints after the settings: `FLEET_CONFIG=`, `NAMESPACES_FINGERPRINT=`,
    /// the settings the file decided and the notes as `#` lines, then the namespaces as TOML, every
    /// field set.
    pub fn describe(&self, dims: CanvasDims) -> String {
        let mut out = format!("{ENV}={}\n", self.path.as_ref().map(|p| p.display().to_string()).unwrap_or_default());
        let namespaces = self.namespaces(dims);
        let fingerprint = namespaces.as_ref().map_or("(invalid namespaces)", |n| n.fingerprint());
        out += &format!("NAMESPACES_FINGERPRINT={fingerprint}\n");
        if !self.applied.is_empty() {
            out += &format!("# from the file: {}\n", self.applied.join(", "));
        }
        for note in &self.notes {
            out += &format!("# note: {note}\n");
        }
        if let Ok(n) = namespaces {
            out += "# the namespaces, resolved (fleet.toml's form, every field set):\n";
            out += &toml::to_string(&n.to_spec()).expect("namespaces serialise as TOML");
        }
        out.trim_end().to_owned()
    }
}

/// Problems and notes found in a file, each with its byte offset there.
#[derive(Default)]
struct Found {
    problems: Vec<(usize, String)>,
    notes: Vec<(usize, String)>,
}

/// Checks the settings table `t` (`fleet` or a binary's), keeping what `reader` takes of it.
fn settings_table(t: &str, table: &Table, reader: &Reader, (shown, text): (&str, &str), into: &mut BTreeMap<String, Setting>, found: &mut Found) {
    let mut seen: BTreeMap<String, String> = BTreeMap::new();
    let mut entries: Vec<_> = table.iter().collect();
    entries.sort_by_key(|(key, _)| key.span().start);
    for (key, value) in entries {
        let offset = key.span().start;
        let key = key.get_ref();
        let at = format!("{shown}:{} [{t}]", line_of(text, offset));
        let mut problem = |p: String| found.problems.push((offset, p));
        let mut name = key.to_ascii_uppercase();
        if SECRETS.contains(&name.as_str()) || reader.secrets.contains(&name) {
            problem(format!("{at}: {key} is a secret: secrets are never read from the file; set {name} in the environment"));
            continue;
        }
        if t != "fleet" && t != reader.table {
            continue; // another binary's table: it checks it
        }
        if let Some(r) = reader.renamed.iter().find(|r| r.old == name) {
            found.notes.push((offset, format!("{at}: {key} is deprecated: read as {}; rename it", r.new.to_ascii_lowercase())));
            name = r.new.to_owned();
        }
        let allowed = if t == "fleet" { FLEET_SETTINGS.contains(&name.as_str()) } else { reader.settings.contains(&name) };
        if !allowed {
            problem(if t != "fleet" {
                format!("{at}: {key} is not a setting of {} (`{} --help` lists them, as environment variables)", reader.binary, reader.binary)
            } else if reader.settings.contains(&name) {
                format!("{at}: {key} is not a fleet-wide setting; set it in [{}]", reader.table)
            } else {
                format!("{at}: {key} is not a fleet-wide setting (those are {})", FLEET_SETTINGS.join(", ").to_ascii_lowercase())
            });
            continue;
        }
        if let Some(other) = seen.insert(name.clone(), key.clone()) {
            problem(format!("{at}: {key} and {other} both set {name}; keep one"));
            continue;
        }
        match text_of(value.get_ref()) {
            Some(value) if reader.settings.contains(&name) => {
                into.insert(name, Setting { value, origin: at });
            }
            Some(_) => {} // a fleet-wide setting this binary does not have
            None => problem(format!("{at}: {key}: a setting is a string, a number, a boolean or an array of them")),
        }
    }
}

/// `value` as an environment variable's text: arrays joined with `,`; none for tables and dates.
fn text_of(value: &toml::Value) -> Option<String> {
    match value {
        toml::Value::String(s) => Some(s.clone()),
        toml::Value::Integer(i) => Some(i.to_string()),
        toml::Value::Float(x) => Some(x.to_string()),
        toml::Value::Boolean(b) => Some(b.to_string()),
        toml::Value::Array(items) => {
            items.iter().map(|i| if matches!(i, toml::Value::Array(_)) { None } else { text_of(i) }).collect::<Option<Vec<_>>>().map(|v| v.join(","))
        }
        toml::Value::Table(_) | toml::Value::Datetime(_) => None,
    }
}

/// The line (from 1) of byte `offset` of `text`.
fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())].iter().filter(|&&b| b == b'\n').count() + 1
}

/// A TOML error as one line: `path:line:column: message`.
fn toml_problem(shown: &str, text: &str, e: &toml::de::Error) -> String {
    let message = e.message().trim();
    match e.span() {
        Some(span) => {
            let start = span.start.min(text.len());
            let column = start - text[..start].rfind('\n').map_or(0, |i| i + 1) + 1;
            format!("{shown}:{}:{column}: {message}", line_of(text, start))
        }
        None => format!("{shown}: {message}"),
    }
}

/// Parses this process's command line into `C` over the file `--config` or `FLEET_CONFIG` names
/// (see the module doc); call it first thing in `main`, before any thread starts.
///
/// # Panics
/// Never; on a command-line error it prints it (after the file's problems) and exits as clap does.
pub fn load<C: clap::Parser>(binary: &'static str, table: &'static str, renamed: &'static [Renamed]) -> (C, FleetFile) {
    load_from(std::env::args_os().collect(), binary, table, renamed)
}

/// [`load`] with the command line `args` (the program's name first).
pub fn load_from<C: clap::Parser>(args: Vec<OsString>, binary: &'static str, table: &'static str, renamed: &'static [Renamed]) -> (C, FleetFile) {
    let reader = Reader::new(binary, table, &C::command(), renamed);
    let mut file = match path_from(args.iter().skip(1).cloned(), std::env::var_os(ENV)) {
        Some(path) => FleetFile::read(&path, &reader),
        None => FleetFile::default(),
    };
    file.apply(&reader, &mut ProcessEnv);
    // Built now: clap reads the environment when the command is built.
    let mut command = C::command();
    let matches = match command.try_get_matches_from_mut(&args) {
        Ok(m) => m,
        Err(e) if !e.use_stderr() => e.exit(), // --help, --version
        Err(e) => {
            for p in &file.problems {
                eprintln!("error: {p}");
            }
            let _ = e.print();
            if let Some(note) = came_from_file(&e, &command, &file) {
                eprintln!("note: {note}");
            }
            std::process::exit(e.exit_code());
        }
    };
    // A flag wins over what the file put in the environment.
    file.applied.retain(|name| {
        command.get_arguments().any(|a| a.get_env().is_some_and(|e| e == name.as_str()) && matches.value_source(a.get_id().as_str()) == Some(ValueSource::EnvVariable))
    });
    match C::from_arg_matches(&matches) {
        Ok(c) => (c, file),
        Err(e) => e.format(&mut command).exit(),
    }
}

/// Where the value clap refused came from, when the file gave it.
fn came_from_file(e: &clap::Error, command: &clap::Command, file: &FleetFile) -> Option<String> {
    let clap::error::ContextValue::String(arg) = e.get(clap::error::ContextKind::InvalidArg)? else { return None };
    let long = arg.split_whitespace().next()?.strip_prefix("--")?;
    let env = command.get_arguments().find(|a| a.get_long() == Some(long))?.get_env()?.to_str()?;
    let setting = file.settings.get(env).filter(|_| file.applied.iter().any(|a| a == env))?;
    Some(format!("{env} = {:?} came from {}", setting.value, setting.origin))
}

#[cfg(test)]
mod tests;
