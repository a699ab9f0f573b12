//! The docs against the code, without root: the README's quick start is what `e2e/run.sh` runs;
//! every selector key and installer flag the docs name exists (and the Multus keys they say do
//! nothing are ignored); every file, test and link they cite is there; the examples' walkthrough
//! runs on kind's node image; and nothing users read speaks of how the project was made.

use regex::Regex;
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every file under `rel` (a file or a directory), as paths relative to the repository.
fn files_under(rel: &str) -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() { walk(&path, out) } else { out.push(path) }
        }
    }
    let path = repo().join(rel);
    let mut found = Vec::new();
    if path.is_dir() {
        walk(&path, &mut found)
    } else {
        found.push(path)
    }
    let mut rels: Vec<String> = found.iter().map(|p| p.strip_prefix(repo()).unwrap().display().to_string()).collect();
    rels.sort();
    rels
}

/// The documentation users and contributors read: README, CONTRIBUTING, docs/, examples/README.md.
fn markdown() -> Vec<String> {
    let mut files = vec![
        "README.md".to_string(),
        "CONTRIBUTING.md".to_string(),
        "CHANGELOG.md".to_string(),
        "examples/README.md".to_string(),
    ];
    files.extend(files_under("docs").into_iter().filter(|f| f.ends_with(".md")));
    files
}

/// The text of code spans (`...`) and code blocks of a Markdown file, with their line numbers.
fn code_of(text: &str) -> Vec<(usize, String)> {
    let span = Regex::new(r"`([^`]+)`").unwrap();
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut in_block = false;
    for (i, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if in_block {
            // A command continued on the next line is one command.
            match out.last_mut() {
                Some((_, last)) if last.ends_with('\\') => {
                    last.pop();
                    last.push_str(line);
                }
                _ => out.push((i + 1, line.to_string())),
            }
        } else {
            out.extend(span.captures_iter(line).map(|c| (i + 1, c[1].to_string())));
        }
    }
    out
}

/// The shell lines of the first ```sh block after the heading `heading`, comments and blank lines
/// dropped.
fn sh_block_after(text: &str, heading: &str) -> Vec<String> {
    let after = &text[text.find(heading).unwrap_or_else(|| panic!("no heading {heading:?}"))..];
    let block = &after[after.find("```sh\n").expect("a ```sh block") + 6..];
    let block = &block[..block.find("```").expect("the block's end")];
    block
        .lines()
        .map(|l| l.split(" #").next().unwrap().trim().to_string())
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect()
}

/// Kinds of sentence about how the project was made rather than what the product does, each with
/// what to write instead, and whether the contributors' pages (docs/testing.md, CONTRIBUTING.md),
/// where the test rig is described, may use it.
struct Wording {
    kind: &'static str,
    pattern: Regex,
    rig_pages_too: bool,
}

fn how_the_project_was_made() -> Vec<Wording> {
    let wording =
        |kind, pattern: &str, rig_pages_too| Wording { kind, pattern: Regex::new(pattern).unwrap(), rig_pages_too };
    vec![
        wording(
            "the project's own notes",
            r"(?i)this stop|previous stop|the run before|\bseed 0\d\d|SPEC §|development VM|\bseeds'|\bseed's\b",
            true,
        ),
        // The release a reader has is a number: say which.
        wording("a release without its number", r"(?i)\b(?:earlier|older|previous|prior) releases?\b", true),
        // What a run of the tests once found, or how a feature came to be as it is.
        wording(
            "history of the project",
            r"(?i)\bfirst\b[\w\s-]{0,30}\bruns?\b[\w\s-]{0,12}\bfailed\b|\bonce caught\b|\bCI run once\b|\b(?:two|both|these|those) cuts\b|\bcuts since\b|\bhas since\b|\bhave since\b|\bbefore and after the\b|\bbefore the agent took\b",
            true,
        ),
        // A goal the developers set themselves, and whether they reached it.
        wording(
            "an internal target",
            r"(?i)\b(?:missed|met|miss|meets?|reach(?:ed|es)?)\b[^.;]{0,60}\btargets?\b|\btargets?\b[^.;|]{0,80}\b(?:is|was|were|are) (?:not )?(?:met|missed|reached)\b|\bthe [\d.]+ ?(?:ms|x|%) target\b|\bthe target, ",
            true,
        ),
        // Programs of the developers' own that the repository does not hold.
        wording("a tool not in the repository", r"(?i)\bfarm-bench\b", true),
        // How the test rig gets by where it runs: only the contributors' pages say that.
        wording(
            "a test-rig workaround",
            r"(?i)\bno (?:image )?registry is reachable\b|\bcannot be (?:fetched|pulled|reached) here\b|\bstand-ins? (?:is|are|was|were) built\b|\bmodule proxy\b|\bother builds\b|\bother developers\b|\bthe VM was shared\b|\bshared with other\b",
            false,
        ),
    ]
}

/// The first kind of `how_the_project_was_made` that `line` of `file` falls into.
fn made_wording<'a>(rules: &'a [Wording], file: &str, line: &str) -> Option<(&'a str, String)> {
    let rig_page = file == "docs/testing.md" || file == "CONTRIBUTING.md";
    rules
        .iter()
        .filter(|w| w.rig_pages_too || !rig_page)
        .find_map(|w| w.pattern.find(line).map(|m| (w.kind, m.as_str().to_string())))
}

#[test]
fn nothing_users_read_speaks_of_how_the_project_was_made() {
    let rules = how_the_project_was_made();
    let mut found = Vec::new();
    // CHANGELOG.md is the one page that tells what changed; it is held to the rest.
    for root in ["README.md", "CONTRIBUTING.md", "CHANGELOG.md", "docs", "examples", "manifests", "overlays", "src"] {
        for file in files_under(root) {
            let Ok(text) = std::fs::read_to_string(repo().join(&file)) else { continue };
            for (i, line) in text.lines().enumerate() {
                if let Some((kind, words)) = made_wording(&rules, &file, line) {
                    found.push(format!("{file}:{}: {kind}: {words:?} in {}", i + 1, line.trim()));
                }
            }
        }
    }
    assert!(found.is_empty(), "say the thing, not how it was made:\n{}", found.join("\n"));
}

/// The lint tells the project's history from the product's behaviour, which may speak of what is
/// no longer there, of runs, targets and proxies of its own.
#[test]
fn the_wording_lint_tells_how_it_was_made_from_what_the_product_does() {
    let rules = how_the_project_was_made();
    for made in [
        "Results that an earlier release kept on disk are read.",
        "The first runs failed two specs with both CNIs alike.",
        "The first pod-networking run failed two specs with yh-genie.",
        "(A CI run once caught host-local killed with its plugin mid-write.)",
        "The target, via the agent at most 1.0x the bridge alone, was missed by about 0.5 ms.",
        "The target, the product path at most 0.9x the bridge alone, is met one at a time.",
        "the cost per extra network is 0.3-0.7 ms, under the 1 ms target, for 2 networks",
        "measured without a tracer (`farm-bench`, 40 runs of each, paired)",
        "Two cuts were made, each measured before.",
        "The VM was shared with other builds unless a figure says it was idle.",
        "built from source, since no registry is reachable there",
        "so a stand-in is built under that name",
    ] {
        assert!(made_wording(&rules, "docs/benchmarks.md", made).is_some(), "not caught: {made}");
    }
    for product in [
        "Only a 410 Gone (the API server no longer has that history: after an outage) makes it list.",
        "a network no longer asked for is detached",
        "ADD makes no API request; the first run of a pod takes the agent's answer.",
        "A relative target keeps working wherever the directory is mounted.",
        "the symlink's target, the fuzz targets, `target/release/yh-genie`",
        "the agent sends the events of earlier runs throughout",
        "Every figure says how busy the machine was; each script prints its own.",
        "0.1.0 kept them in <dataDir>/results; 0.2.0 reads them.",
        "the kubelet retries it with a backoff, and each attempt says why",
    ] {
        assert_eq!(made_wording(&rules, "docs/agent.md", product), None, "product wording caught: {product}");
    }
    // The contributors' pages may describe the rig.
    assert_eq!(made_wording(&rules, "docs/testing.md", "fetched through the Go module proxy"), None);
    assert!(made_wording(&rules, "docs/kind.md", "fetched through the Go module proxy").is_some());
}

/// What `e2e/run.sh` runs of the README's commands: its command lines with the script's variables
/// replaced by their values (`$repo/` is the checkout, `$yh_image` the manifest's image, `$cluster`
/// the kind config's name) and kind's argument arrays spelled out.
fn commands_of_run_sh() -> Vec<String> {
    let script = read("e2e/run.sh");
    let image = Regex::new(r"(?m)^\s*image:\s*(\S+)").unwrap().captures(&read("manifests/yh-genie.yaml")).unwrap()[1]
        .to_string();
    let cluster =
        Regex::new(r"(?m)^name:\s*(\S+)").unwrap().captures(&read("kind-config.yaml")).unwrap()[1].to_string();
    let array = Regex::new(r"^(?:local\s+)?(\w+)=\((.*)\)$").unwrap();
    let expansion = Regex::new(r"\$\{(\w+)\[@\]\}").unwrap();
    let mut arrays = BTreeMap::new();
    let mut commands = Vec::new();
    for line in script.lines() {
        let line = line
            .trim()
            .replace("\"$repo/", "")
            .replace("$repo/", "")
            .replace("\"$repo\"", ".")
            .replace("$yh_image", &image)
            .replace("$cluster", &cluster)
            .replace('"', "");
        if let Some(c) = array.captures(&line) {
            arrays.insert(c[1].to_string(), c[2].to_string());
            continue;
        }
        let spelled = expansion
            .replace_all(&line, |c: &regex::Captures| arrays.get(&c[1]).cloned().unwrap_or_else(|| c[0].to_string()));
        commands.push(spelled.split_whitespace().collect::<Vec<_>>().join(" "));
    }
    commands
}

/// Whether `run` (a line of e2e/run.sh) runs `command` (the README's): the same words, in order,
/// where `run` may add options of its own (`--flag` and its value: the script's kubeconfig, a wait),
/// which change where the command's output goes, not what it does.
fn runs_the_same(run: &str, command: &str) -> bool {
    let mut wanted = command.split_whitespace().peekable();
    let mut skipping_a_value = false;
    for word in run.split_whitespace() {
        if wanted.peek() == Some(&word) {
            wanted.next();
            skipping_a_value = false;
        } else if word.starts_with("--") {
            skipping_a_value = !word.contains('=');
        } else if skipping_a_value {
            skipping_a_value = false;
        } else {
            return false;
        }
    }
    wanted.next().is_none()
}

#[test]
fn the_readme_quick_start_is_what_e2e_run_sh_runs() {
    let quick_start = sh_block_after(&read("README.md"), "## Quick start on kind");
    assert!(quick_start.len() >= 5, "{quick_start:?}");
    let run = commands_of_run_sh();
    let mut from = 0;
    for command in &quick_start {
        let at = run[from..].iter().position(|line| runs_the_same(line, command)).map(|i| from + i);
        let at = at.unwrap_or_else(|| {
            panic!("the README's quick start runs {command:?}, which e2e/run.sh does not run (after its line {from:?}):\n{}", run.join("\n"))
        });
        from = at + 1;
    }
}

#[test]
fn a_run_sh_line_may_add_options_but_not_words() {
    let create = "kind create cluster --name yh-genie --config kind-config.yaml --kubeconfig /k --wait 0s";
    assert!(runs_the_same(create, "kind create cluster --config kind-config.yaml"));
    assert!(!runs_the_same(create, "kind create cluster --config other.yaml"));
    assert!(!runs_the_same("kubectl apply -f manifests/kubernetes-1.30/", "kubectl apply -f manifests/"));
    assert!(!runs_the_same("kubectl delete -f manifests/", "kubectl apply -f manifests/"));
    assert!(!runs_the_same("kind create cluster", "kind create cluster --config kind-config.yaml"));
}

/// The selector's keys a doc's table names: the backticked names in the first column of every
/// table row, those that look like configuration keys.
fn keys_in_tables(text: &str, section_start: &str, section_end: &str) -> BTreeSet<String> {
    let start = text.find(section_start).unwrap_or_else(|| panic!("no {section_start:?}"));
    let section = &text[start..];
    let section = &section[..section.find(section_end).unwrap_or(section.len())];
    let key = Regex::new(r"^[a-z][A-Za-z_]*$").unwrap();
    let span = Regex::new(r"`([^`]+)`").unwrap();
    section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .flat_map(|l| {
            let first = l.split('|').nth(1).unwrap_or_default().to_string();
            span.captures_iter(&first).map(|c| c[1].to_string()).collect::<Vec<_>>()
        })
        .filter(|k| key.is_match(k))
        .collect()
}

fn selector_config(
    extra: Value,
) -> Result<yh_genie::programs::selector::config::SelectorConfig, yh_genie::platform::cni::CniError> {
    let mut conf = json!({"cniVersion": "1.0.0", "name": "yh-genie", "type": "yh-genie"});
    for (k, v) in extra.as_object().unwrap() {
        conf[k] = v.clone();
    }
    yh_genie::programs::selector::config::SelectorConfig::from_plugin_conf(
        &yh_genie::platform::cni::PluginConf::from_value(conf).unwrap(),
    )
}

/// Whether the selector reads `key`: a value no key can take is refused naming it (a known key of
/// the wrong type is code 7 naming the key), or, for the logging keys every plugin reads
/// leniently, a valid value changes the logging.
fn selector_reads(key: &str) -> bool {
    let logging = |value: Value| {
        let raw = json!({ key: value });
        yh_genie::platform::logging::LogConfig::from_keys(raw.as_object().unwrap())
            != yh_genie::platform::logging::LogConfig::default()
    };
    match key {
        "logLevel" => logging(json!("debug")),
        "logFile" => logging(json!("/var/log/x.log")),
        "logMaxSizeMB" => logging(json!(2)),
        "logMaxFiles" => logging(json!(7)),
        _ => selector_config(json!({ key: [[[]]] })).is_err_and(|e| e.code == 7 && e.msg.contains(key)),
    }
}

#[test]
fn every_selector_key_the_docs_name_is_read() {
    let selector = read("docs/selector.md");
    let named = keys_in_tables(&selector, "## Configuration", "## Which networks a pod gets");
    let migrate = read("docs/migrate.md");
    let unchanged = keys_in_tables(&migrate, "Work unchanged", "Do not work");
    assert!(named.len() > 20 && unchanged.len() > 8, "{named:?} {unchanged:?}");
    let unread: Vec<&String> = named.iter().chain(&unchanged).filter(|k| !selector_reads(k)).collect();
    assert!(unread.is_empty(), "the docs name selector keys the selector does not read: {unread:?}");
}

/// The Multus keys the docs say do nothing here are accepted and ignored, whatever their value.
#[test]
fn the_multus_keys_the_docs_say_do_nothing_are_ignored() {
    let selector = read("docs/selector.md");
    let ignored = keys_in_tables(&selector, "What Multus keys still do not work", "**Interfaces.**");
    // Two of its rows are keys read here that behave otherwise (their default, their waiting).
    let ignored: Vec<&String> =
        ignored.iter().filter(|k| !["namespaceIsolation", "readinessindicatorfile"].contains(&k.as_str())).collect();
    assert!(ignored.len() >= 6, "{ignored:?}");
    for key in ignored {
        assert!(selector_config(json!({ key: [[[]]] })).is_ok(), "{key} is said to do nothing but is read");
    }
}

/// The flags of `yh-genie COMMAND` as its command line defines them: flag, variable, default. Each is
/// checked to be in `yh-genie COMMAND --help` as it is defined.
fn flags_of(command: &str) -> BTreeMap<String, (Option<String>, Option<String>)> {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_yh-genie")).args([command, "--help"]).output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    let cli = yh_genie::programs::commands::command("yh-genie");
    let definition = cli.find_subcommand(command).unwrap_or_else(|| panic!("no command {command}"));
    let mut flags = BTreeMap::new();
    for arg in definition.get_arguments() {
        let name = format!("--{}", arg.get_long().unwrap());
        let env = arg.get_env().map(|v| v.to_str().unwrap().to_string());
        // A switch's default is only its being off.
        let default = arg
            .get_default_values()
            .first()
            .filter(|_| arg.get_action().takes_values())
            .map(|d| d.to_str().unwrap().to_string());
        let names_the_flag =
            |l: &&str| l.trim_start().starts_with('-') && l.split([' ', ',', '[']).any(|word| word == name);
        let line = help
            .lines()
            .skip_while(|l| !names_the_flag(l))
            .nth(1)
            .unwrap_or_else(|| panic!("`yh-genie {command} --help` has no {name}:\n{help}"));
        if let Some(env) = &env {
            assert!(line.contains(&format!("[env: {env}]")), "{name}: `--help` does not show {env}: {line}");
        }
        if let Some(default) = &default {
            assert!(line.contains(&format!("[default: {default}]")), "{name}: `--help` shows no default: {line}");
        }
        flags.insert(name, (env, default));
    }
    flags
}

/// The installer's flags: flag, variable, default.
fn installer_flags() -> BTreeMap<String, (String, Option<String>)> {
    let flags: BTreeMap<_, _> = flags_of("install")
        .into_iter()
        .map(|(name, (env, default))| {
            let env = env.unwrap_or_else(|| panic!("{name} has no variable"));
            (name, (env, default))
        })
        .collect();
    assert!(flags.len() > 15, "{flags:?}");
    flags
}

#[test]
fn the_installer_reference_is_its_help() {
    let flags = installer_flags();
    let install = read("docs/install.md");
    let table = &install[install.find("| flag | environment | default | meaning |").expect("the installer table")..];
    let row = Regex::new(r"^\| `(--[a-z-]+)[^`]*` \| `(YH_GENIE_[A-Z_]+)`[^|]*\| ([^|]*) \|").unwrap();
    let mut documented = BTreeMap::new();
    for line in table.lines().skip(2).take_while(|l| l.starts_with('|')) {
        let c = row.captures(line).unwrap_or_else(|| panic!("not a row of the installer table: {line}"));
        documented.insert(c[1].to_string(), (c[2].to_string(), c[3].trim().to_string()));
    }
    let documented_names: BTreeSet<&String> = documented.keys().collect();
    let real_names: BTreeSet<&String> = flags.keys().collect();
    assert_eq!(documented_names, real_names, "docs/install.md's table and `yh-genie install --help` list other flags");
    for (name, (env, default)) in &flags {
        let (doc_env, doc_default) = &documented[name];
        assert_eq!(doc_env, env, "{name}");
        match default {
            Some(d) => {
                assert!(doc_default.contains(&format!("`{d}`")), "{name}: the table says {doc_default}, --help {d}")
            }
            None => assert!(
                doc_default.starts_with("none")
                    || doc_default.starts_with("off")
                    || doc_default.contains("$KUBERNETES"),
                "{name}: the table gives a default ({doc_default}) that --help does not"
            ),
        }
    }
}

#[test]
fn every_flag_the_docs_give_yh_genie_exists() {
    let commands = yh_genie::programs::commands::command("yh-genie");
    let mut known: BTreeSet<String> = commands
        .get_subcommands()
        .filter(|c| !c.is_hide_set())
        .flat_map(|c| flags_of(c.get_name()).into_keys())
        .collect();
    let flag = Regex::new(r"--[a-z][a-z-]*").unwrap();
    known.extend(["--help", "--version"].map(String::from));
    // The repository's scripts have flags of their own.
    for dir in ["scripts", "bench", "e2e"] {
        for script in files_under(dir) {
            let text = std::fs::read_to_string(repo().join(script)).unwrap_or_default();
            known.extend(flag.find_iter(&text).map(|m| m.as_str().to_string()));
        }
    }
    // So do other programs: a command that starts with one is theirs.
    let other = Regex::new(
        r"^(sudo )?(kubectl|kind|docker|cargo|go|curl|crictl|ctr|ginkgo|git|shellcheck|ip|tc|ls|rm|nc|iptables-save|iptables-restore)\b",
    )
    .unwrap();
    let mut unknown = Vec::new();
    for file in markdown() {
        for (line, code) in code_of(&read(&file)) {
            if other.is_match(code.trim_start()) {
                continue;
            }
            for m in flag.find_iter(&code) {
                if !known.contains(m.as_str()) {
                    unknown.push(format!("{file}:{line}: {} in `{code}`", m.as_str()));
                }
            }
        }
    }
    assert!(unknown.is_empty(), "flags yh-genie does not have:\n{}", unknown.join("\n"));
}

/// GitHub's anchor of a heading.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    text.lines().filter(|l| l.starts_with('#')).map(|l| slug(l.trim_start_matches('#'))).collect()
}

/// A path the docs cite in code: a file or directory of the checkout, a test target by its path
/// without `.rs` (`tests/conformance`), or a script the test command runs only where it exists.
fn cited_path_exists(rel: &str, optional: &BTreeSet<String>) -> bool {
    repo().join(rel).exists() || repo().join(format!("{rel}.rs")).exists() || optional.contains(rel)
}

#[test]
fn everything_the_docs_cite_exists() {
    let link = Regex::new(r"\]\(([^)\s]+)\)").unwrap();
    let path = Regex::new(
        r"^(?:\.\./)?((?:tests|src|scripts|bench|e2e|examples|manifests|overlays|tools|fuzz|docs)/[\w./-]*\w)$",
    )
    .unwrap();
    let test_fn = Regex::new(r"`(tests/[\w/]+(?:\.rs)?)`(?:'s)?,? `([a-z_0-9]+)`").unwrap();
    // What scripts/test.sh runs only when the checkout has it (`[ ! -x <script> ]`).
    let optional: BTreeSet<String> = Regex::new(r"\[ ! -x ([\w./-]+) \]")
        .unwrap()
        .captures_iter(&read("scripts/test.sh"))
        .map(|c| c[1].to_string())
        .collect();
    let mut missing = Vec::new();
    for file in markdown() {
        let text = read(&file);
        let dir = Path::new(&file).parent().unwrap();
        for (i, line) in text.lines().enumerate() {
            for c in link.captures_iter(line) {
                let target = &c[1];
                if target.starts_with("http") || target.starts_with("mailto:") {
                    continue;
                }
                let (rel, anchor) = target.split_once('#').unwrap_or((target, ""));
                let resolved = if rel.is_empty() { PathBuf::from(&file) } else { dir.join(rel) };
                let full = repo().join(&resolved);
                if !full.exists() {
                    missing.push(format!("{file}:{}: link to {target}: no {}", i + 1, resolved.display()));
                } else if !anchor.is_empty() && !anchors(&std::fs::read_to_string(&full).unwrap()).contains(anchor) {
                    missing.push(format!("{file}:{}: link to {target}: no heading #{anchor}", i + 1));
                }
            }
            for c in test_fn.captures_iter(line) {
                let tests = repo().join(&c[1]);
                let dir = if tests.is_dir() { tests.clone() } else { tests.with_extension("") };
                let mut sources: Vec<PathBuf> = vec![tests.clone()];
                if dir.is_dir() {
                    sources.extend(
                        files_under(dir.strip_prefix(repo()).unwrap().to_str().unwrap()).iter().map(|f| repo().join(f)),
                    );
                }
                let name = &c[2];
                let defined = sources
                    .iter()
                    .filter_map(|s| std::fs::read_to_string(s).ok())
                    .any(|s| s.contains(&format!("fn {name}(")) || s.contains(&format!("\"{name}\"")));
                if !defined {
                    missing.push(format!("{file}:{}: no test {name} in {}", i + 1, &c[1]));
                }
            }
        }
        for (line, code) in code_of(&text) {
            for word in code.split_whitespace() {
                let word = word.trim_matches(|c: char| ",;:()".contains(c));
                if let Some(c) = path.captures(word)
                    && !word.contains('<')
                    && !cited_path_exists(&c[1], &optional)
                {
                    missing.push(format!("{file}:{line}: no {}", &c[1]));
                }
            }
        }
    }
    assert!(missing.is_empty(), "the docs cite what is not there:\n{}", missing.join("\n"));
}

/// The plugin types a network's chain runs, its plugins' and what they run by default.
fn plugin_types(conflist: &Value) -> BTreeSet<String> {
    let mut types = BTreeSet::new();
    for plugin in conflist["plugins"].as_array().unwrap() {
        let t = plugin["type"].as_str().unwrap();
        types.insert(t.to_string());
        types.insert(plugin["ipam"]["type"].as_str().unwrap_or("host-local").to_string());
        if t == "yonghui" {
            types.insert(plugin["delegate"]["type"].as_str().unwrap_or("yh-bridge").to_string());
        }
    }
    types
}

#[test]
fn the_examples_walkthrough_runs_on_kinds_node_image() {
    // kind's node image keeps these of the reference plugins; yh-genie brings its own.
    let kind: BTreeSet<&str> = ["host-local", "loopback", "ptp", "portmap"].into_iter().collect();
    let own: BTreeSet<&str> = yh_genie::programs::plugins::NAMES.iter().copied().collect();
    let walkthrough = sh_block_after(&read("examples/README.md"), "On kind");
    let apply = Regex::new(r"^kubectl apply -f (examples/pods/\S+\.yaml)$").unwrap();
    let pods: Vec<String> = walkthrough.iter().filter_map(|l| apply.captures(l).map(|c| c[1].to_string())).collect();
    assert!(!pods.is_empty(), "{walkthrough:?}");
    for pod in pods {
        let docs: Vec<Value> = serde_saphyr::from_multiple(&read(&pod)).unwrap();
        let networks: Vec<String> = docs
            .iter()
            .filter(|d| d["kind"] == "ConfigMap")
            .flat_map(|d| d["data"].as_object().unwrap().values().map(|v| v.as_str().unwrap().to_string()))
            .map(|v| v.split('/').next().unwrap().to_string())
            .collect();
        assert!(!networks.is_empty(), "{pod} names no network by ConfigMap");
        for network in networks {
            let conflist: Value =
                serde_json::from_str(&read(&format!("examples/networks/{network}.conflist"))).unwrap();
            for t in plugin_types(&conflist) {
                assert!(
                    kind.contains(t.as_str()) || own.contains(t.as_str()),
                    "{pod}: network {network} runs {t}, which kind's node image lacks"
                );
            }
        }
    }
}
