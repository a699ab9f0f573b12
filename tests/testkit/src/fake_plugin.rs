//! Fake CNI plugins: small shell scripts that do what a test asks of a plugin (answer a result,
//! fail with a code and a message, record what they were handed, wait, hand the call on to another
//! plugin), written into a bin dir so that the selector, a runtime or a benchmark runs them as it
//! runs any plugin.
//!
//! A [`FakePlugin`] says, command by command (`ADD`, `DEL`, `CHECK`, ...), the [`Step`]s it takes;
//! a command given no steps reads its stdin and exits 0 printing nothing, which a runtime takes as
//! success for everything but ADD.
//!
//! ```ignore
//! // Answers ADD with an empty result; every other command succeeds.
//! FakePlugin::new().on("ADD", [Step::Answer(json!({"cniVersion": "1.0.0"}))]).write(&bin.join("noop"));
//! ```

use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a fake plugin does, in order, for a command.
pub enum Step {
    /// Create this (empty) file: a marker the test waits for.
    Touch(PathBuf),
    /// Pause.
    Sleep(Duration),
    /// Wait until this file exists, checking every 100 ms, for at most the duration; then go on
    /// whether or not it came.
    WaitFor(PathBuf, Duration),
    /// A shell command of the test's own; the plugin's environment (`CNI_NETNS`, `CNI_IFNAME`...)
    /// is in reach.
    Shell(String),
    /// While this file exists, fail as [`Step::Fail`] does; without it, go on.
    FailWhileExists(PathBuf, u32, String),
    /// Print this result and exit 0.
    Answer(Value),
    /// Print a CNI error with this code and message (in `cniVersion` 1.0.0) and exit 1.
    Fail(u32, String),
    /// Run the plugin of this name from the same bin dir in its place (`exec`, so it keeps the
    /// fake's process, stdin and open files: a delegate, as flannel execs one).
    Exec(String),
    /// Run the plugin of this name from the same bin dir with the command's stdin and go on; the
    /// fake exits with its exit code once its steps are done.
    Run(String),
}

/// A fake plugin: what each command does, and whether it records what it is handed.
#[derive(Default)]
pub struct FakePlugin {
    commands: Vec<(String, Vec<Step>)>,
    otherwise: Vec<Step>,
    recorded_in: Option<(PathBuf, String)>,
}

/// `text` quoted for the shell, taken literally whatever it holds.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', r"'\''"))
}

fn path(p: &Path) -> String {
    quoted(&p.display().to_string())
}

/// The CNI error a plugin prints on stdout.
fn error(code: u32, message: &str) -> String {
    json!({"cniVersion": "1.0.0", "code": code, "msg": message}).to_string()
}

impl Step {
    /// Whether the step hands the command's stdin to another plugin, so that the fake must not
    /// read it first.
    fn passes_stdin_on(&self) -> bool {
        matches!(self, Step::Exec(_) | Step::Run(_))
    }

    fn script(&self) -> String {
        let plugin = |name: &str| format!("\"$(dirname \"$0\")\"/{}", quoted(name));
        match self {
            Step::Touch(file) => format!("touch {}", path(file)),
            Step::Sleep(pause) => format!("sleep {}", pause.as_secs_f64()),
            Step::WaitFor(file, limit) => format!(
                "for i in $(seq {}); do [ -e {} ] && break; sleep 0.1; done",
                limit.as_millis().div_ceil(100).max(1),
                path(file)
            ),
            Step::Shell(command) => command.clone(),
            Step::FailWhileExists(file, code, message) => {
                format!("if [ -e {} ]; then echo {}; exit 1; fi", path(file), quoted(&error(*code, message)))
            }
            Step::Answer(result) => format!("echo {}; exit 0", quoted(&result.to_string())),
            Step::Fail(code, message) => format!("echo {}; exit 1", quoted(&error(*code, message))),
            Step::Exec(name) => format!("exec {}", plugin(name)),
            Step::Run(name) => format!("{}; rc=$?", plugin(name)),
        }
    }
}

impl FakePlugin {
    /// A plugin for which every command succeeds, printing nothing.
    pub fn new() -> FakePlugin {
        FakePlugin::default()
    }

    /// What `command` (`ADD`, `DEL`, `CHECK`, `GC`, `STATUS`, `VERSION`) does.
    pub fn on(mut self, command: &str, steps: impl IntoIterator<Item = Step>) -> FakePlugin {
        self.commands.push((command.to_string(), steps.into_iter().collect()));
        self
    }

    /// What every command not given steps of its own with [`FakePlugin::on`] does.
    pub fn otherwise(mut self, steps: impl IntoIterator<Item = Step>) -> FakePlugin {
        self.otherwise = steps.into_iter().collect();
        self
    }

    /// Record what each command gets on stdin, in `dir/<command>.<tag>.<container id>` (the
    /// container id empty for the commands that have none: GC and STATUS).
    pub fn record_stdin(mut self, dir: &Path, tag: &str) -> FakePlugin {
        self.recorded_in = Some((dir.to_path_buf(), tag.to_string()));
        self
    }

    /// The plugin's shell script.
    pub fn script(&self) -> String {
        let mut out =
            String::from("#!/bin/sh\n# A fake CNI plugin (testkit::fake_plugin).\nrc=0\ncase \"$CNI_COMMAND\" in\n");
        let arms = self.commands.iter().map(|(command, steps)| (quoted(command), steps));
        for (pattern, steps) in arms.chain(std::iter::once(("*".to_string(), &self.otherwise))) {
            out.push_str(&format!("{pattern})\n"));
            if !steps.iter().any(Step::passes_stdin_on) {
                out.push_str(&format!("  {}\n", self.read_stdin()));
            } else {
                assert!(self.recorded_in.is_none(), "a fake plugin cannot both record its stdin and pass it on");
            }
            for step in steps {
                out.push_str(&format!("  {}\n", step.script()));
            }
            out.push_str("  ;;\n");
        }
        out.push_str("esac\nexit $rc\n");
        out
    }

    fn read_stdin(&self) -> String {
        match &self.recorded_in {
            None => "cat >/dev/null".to_string(),
            Some((dir, tag)) => {
                format!("cat >{}/\"$CNI_COMMAND\".{}.\"$CNI_CONTAINERID\"", path(dir), quoted(tag))
            }
        }
    }

    /// Write the plugin as the executable `path` (see [`crate::process::write_executable`]).
    pub fn write(&self, path: &Path) {
        crate::process::write_executable(path, self.script());
    }
}
