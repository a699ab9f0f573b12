//! Kubernetes' own e2e suite (`e2e.test`, built from the cluster's source by
//! scripts/cluster/build.sh) run against the cluster by the ginkgo CLI, in the control plane's
//! network namespace, with the images the nodes already have (`KUBE_TEST_REPO_LIST`): no registry
//! is ever asked. What it leaves in its output dir: `e2e.log` (everything the suite printed),
//! `junit.xml` and `report.json` (ginkgo's reports), `summary.txt` (what `Summary` prints).

use super::Cluster;
use super::e2e_images::E2E_REGISTRY;
use serde_json::Value;
use std::fmt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The specs a run of the suite selects, and where its output goes.
pub struct Specs<'a> {
    /// Regular expression over the specs' full text (ginkgo's `--focus`).
    pub focus: &'a str,
    /// Ginkgo processes running specs side by side (specs marked Serial run alone at the end).
    pub procs: u32,
    /// The whole run's bound (ginkgo's `--timeout`, e.g. "20m"): specs that hang on something
    /// missing wait out the framework's own timeouts, each of several minutes.
    pub timeout: &'a str,
    pub output: PathBuf,
}

/// What a run's report says: each spec the focus took, by outcome.
#[derive(Debug, Default)]
pub struct Summary {
    pub passed: Vec<String>,
    /// Spec and the framework's failure message.
    pub failed: Vec<(String, String)>,
    /// Spec and why the spec itself said it cannot run here (e.g. "requires at least 3 nodes").
    pub skipped: Vec<(String, String)>,
    pub seconds: u64,
}

impl Cluster {
    /// Runs the selected specs to the end and reads the report; panics only when the suite could
    /// not run or left no report (a failing spec is in the summary, not a panic).
    pub fn run_e2e(&self, run: &Specs) -> Summary {
        std::fs::create_dir_all(&run.output).unwrap();
        let repo_list = run.output.join("repo-list.yaml");
        std::fs::write(&repo_list, format!("promoterE2eRegistry: {E2E_REGISTRY}\n")).unwrap();
        let report = run.output.join("report.json");
        let _ = std::fs::remove_file(&report);
        let log = std::fs::File::create(run.output.join("e2e.log")).unwrap();
        let started = Instant::now();
        let mut ginkgo = Command::new("nsenter");
        ginkgo
            .arg(format!("--net={}", self.control_netns().path().display()))
            .arg("--")
            .arg(self.bin.join("ginkgo"))
            .args([
                format!("--procs={}", run.procs),
                format!("--focus={}", run.focus),
                format!("--timeout={}", run.timeout),
                "--no-color".into(),
                "--silence-skips".into(),
                format!("--output-dir={}", run.output.display()),
                "--json-report=report.json".into(),
                "--junit-report=junit.xml".into(),
            ])
            .arg(self.bin.join("e2e.test"))
            .arg("--")
            .args([
                format!("--kubeconfig={}", self.control.admin_kubeconfig().display()),
                "--provider=skeleton".into(),
                format!("--num-nodes={}", self.workers.len()),
                format!("--report-dir={}", run.output.display()),
                // The nodes' logs are in the run dir already; the suite's own dump wants ssh.
                "--disable-log-dump".into(),
            ])
            .env("KUBE_TEST_REPO_LIST", &repo_list)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log);
        // The exit status says only whether a spec failed; the report says which, or that the
        // suite never ran (no report).
        let _ = ginkgo.status().expect("ginkgo runs");
        let text = std::fs::read_to_string(&report).unwrap_or_else(|e| {
            panic!(
                "the e2e suite left no report ({e}); its log, {}:\n{}",
                run.output.join("e2e.log").display(),
                tail(&run.output.join("e2e.log"), 40)
            )
        });
        let mut summary = Summary::from_report(&serde_json::from_str(&text).expect("ginkgo's JSON report"));
        summary.seconds = started.elapsed().as_secs();
        std::fs::write(run.output.join("summary.txt"), summary.to_string()).unwrap();
        summary
    }
}

impl Summary {
    /// Ginkgo's JSON report: one suite, its `SpecReports` (the `It`s and the suite's setup nodes).
    /// A spec the focus did not take is "skipped" without a message; one that skipped itself at
    /// run time has its reason as the failure message.
    fn from_report(report: &Value) -> Self {
        let mut summary = Summary::default();
        for spec in report
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|suite| suite["SpecReports"].as_array().into_iter().flatten())
        {
            let message = spec["Failure"]["Message"].as_str().unwrap_or_default().trim().to_string();
            let name = if spec["LeafNodeType"] == "It" {
                let mut parts: Vec<&str> = spec["ContainerHierarchyTexts"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                parts.push(spec["LeafNodeText"].as_str().unwrap_or_default());
                parts.join(" ")
            } else {
                // BeforeSuite and friends: only a failure of theirs is worth a line.
                format!("[{}]", spec["LeafNodeType"].as_str().unwrap_or_default())
            };
            match spec["State"].as_str().unwrap_or_default() {
                "passed" if spec["LeafNodeType"] == "It" => summary.passed.push(name),
                "passed" => {}
                "skipped" if message.is_empty() => {}
                "skipped" => summary.skipped.push((name, message)),
                "pending" => {}
                _ => summary.failed.push((name, message)),
            }
        }
        summary
    }
}

impl fmt::Display for Summary {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        writeln!(
            f,
            "{} passed, {} failed, {} skipped in {} s",
            self.passed.len(),
            self.failed.len(),
            self.skipped.len(),
            self.seconds
        )?;
        for (name, message) in &self.failed {
            writeln!(f, "FAILED {name}\n    {}", first_lines(message, 6).replace('\n', "\n    "))?;
        }
        for (name, message) in &self.skipped {
            writeln!(f, "skipped {name}\n    {}", first_lines(message, 2).replace('\n', "\n    "))?;
        }
        for name in &self.passed {
            writeln!(f, "passed {name}")?;
        }
        Ok(())
    }
}

fn first_lines(text: &str, n: usize) -> String {
    text.lines().take(n).collect::<Vec<_>>().join("\n")
}

fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
