//! The command line: global flags, commands and their manual (`--help` of each command has a
//! description and examples).

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};
use nodewright_core::rollout::disruption::MaxDisrupted;

/// Output formats (`-o`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned columns.
    Table,
    /// Aligned columns, with more of them.
    Wide,
    /// JSON (one document).
    Json,
    /// YAML (one document).
    Yaml,
}

/// The shells `completion` writes a script for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Shell {
    /// bash
    Bash,
    /// zsh
    Zsh,
    /// fish
    Fish,
}

/// The stages a package can be rerun from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RerunStage {
    /// From the install.
    Apply,
    /// From the configuration.
    Config,
    /// From the interrupt (packages with an interrupt).
    Interrupt,
    /// From the post-interrupt check (packages with an interrupt).
    PostInterrupt,
}

/// A package stage as `--stage` names it (`package logs`, `node update-state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StageArg {
    /// apply
    Apply,
    /// config
    Config,
    /// interrupt (the node's merged interrupt; packages with an interrupt)
    Interrupt,
    /// post-interrupt (packages with an interrupt)
    PostInterrupt,
    /// upgrade
    Upgrade,
    /// uninstall
    Uninstall,
}

impl StageArg {
    /// The node-state stage.
    pub fn stage(self) -> nodewright_shared::node_state::Stage {
        use nodewright_shared::node_state::Stage;
        match self {
            StageArg::Apply => Stage::Apply,
            StageArg::Config => Stage::Config,
            StageArg::Interrupt => Stage::Interrupt,
            StageArg::PostInterrupt => Stage::PostInterrupt,
            StageArg::Upgrade => Stage::Upgrade,
            StageArg::Uninstall => Stage::Uninstall,
        }
    }
}

const ABOUT: &str = "Drive NodeWright from kubectl: rollout status per node, why a node or package \
is stuck, rerun a package, pause a rollout, reset a node, preview a rollout before it happens.";

const LONG_ABOUT: &str = "\
kubectl-nodewright is the command line of the NodeWright operator. Installed on PATH it is also
`kubectl nodewright`.

It reads what the operator records (node annotations `nodewright.nvidia.com/nodeState_<name>`, the
NodeWright status, the stage Jobs in the operator's namespace) with the operator's own code, and
writes the same records the operator reads. Every write can be previewed with --dry-run (the API
server validates it and nothing is stored), and writes that change a rollout ask for a
confirmation (-y skips it; without a terminal and without -y they refuse).

Exit status: 0 success, 1 failure, 2 usage (a command line that cannot work as typed).";

const EXAMPLES: &str = "\
Examples:
  # Where is the rollout of gpu-setup, node by node?
  kubectl nodewright node list --nodewright gpu-setup

  # Why is node-7 not complete?
  kubectl nodewright why gpu-setup --node node-7

  # What would applying this change do, batch by batch?
  kubectl nodewright plan gpu-setup -f gpu-setup.yaml";

/// `kubectl-nodewright`.
#[derive(Debug, Parser)]
#[command(
    name = "kubectl-nodewright",
    bin_name = "kubectl nodewright",
    version,
    about = ABOUT,
    long_about = LONG_ABOUT,
    after_help = EXAMPLES,
    propagate_version = true
)]
pub struct Cli {
    /// Global flags.
    #[command(flatten)]
    pub global: Global,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// Flags every command takes.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Global options")]
pub struct Global {
    /// Path to the kubeconfig file (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long, global = true, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The kubeconfig cluster to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub cluster: Option<String>,
    /// The kubeconfig user to use.
    #[arg(long, global = true, value_name = "NAME")]
    pub user: Option<String>,
    /// The API server's address, as kubectl's `--server` (`-s`); works without a kubeconfig.
    #[arg(short = 's', long, global = true, value_name = "URL")]
    pub server: Option<String>,
    /// A bearer token for the API server (replaces the kubeconfig user's credentials).
    #[arg(long, global = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// A PEM file of the certificate authorities the API server's certificate must chain to.
    #[arg(long, global = true, value_name = "FILE")]
    pub certificate_authority: Option<PathBuf>,
    /// Do not check the API server's certificate (insecure: anyone on the path can impersonate it).
    #[arg(long, global = true)]
    pub insecure_skip_tls_verify: bool,
    /// The name the API server's certificate is checked against (default: the server's host).
    #[arg(long, global = true, value_name = "NAME")]
    pub tls_server_name: Option<String>,
    /// Act as this user (impersonation, as kubectl's `--as`).
    #[arg(long = "as", global = true, value_name = "USER")]
    pub as_user: Option<String>,
    /// Act as a member of this group (repeatable; with `--as`).
    #[arg(long = "as-group", global = true, value_name = "GROUP")]
    pub as_group: Vec<String>,
    /// The operator's namespace (its Jobs, pods and Deployment live there; NodeWrights are
    /// cluster-scoped).
    #[arg(
        short = 'n',
        long,
        global = true,
        default_value = "nodewright",
        value_name = "NAMESPACE"
    )]
    pub namespace: String,
    /// The namespace of the package Jobs, their pods and ConfigMaps (default: the operator
    /// Deployment's `PACKAGE_NAMESPACE`, e.g. the chart's `nodewright-packages`; else the
    /// operator's namespace).
    #[arg(
        long,
        global = true,
        env = "NODEWRIGHT_PACKAGE_NAMESPACE",
        value_name = "NAMESPACE"
    )]
    pub package_namespace: Option<String>,
    /// The operator's cluster-wide disruption cap that `plan` and `why` reckon with: a node count
    /// (`10`) or a percent of the cluster's nodes (`10%`) (default: the operator Deployment's
    /// `MAX_DISRUPTED_NODES`, the chart's `operator.maxDisruptedNodes`).
    #[arg(
        long,
        global = true,
        env = "NODEWRIGHT_MAX_DISRUPTED_NODES",
        value_name = "COUNT|PERCENT",
        value_parser = parse_max_disrupted
    )]
    pub max_disrupted_nodes: Option<MaxDisrupted>,
    /// How long one API request may take, as a Go duration (`30s`, `1m`).
    #[arg(long, global = true, default_value = "30s", value_name = "DURATION")]
    pub request_timeout: String,
    /// Output format.
    #[arg(
        short = 'o',
        long,
        global = true,
        value_enum,
        ignore_case = true,
        default_value = "table"
    )]
    pub output: Format,
    /// Print what would be written (validated by the API server), write nothing.
    #[arg(long, global = true)]
    pub dry_run: bool,
    /// More detail on stderr (repeat for more).
    #[arg(short = 'v', long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

/// A confirmation flag.
#[derive(Debug, Clone, Copy, Args)]
pub struct Confirm {
    /// Do not ask for a confirmation.
    #[arg(short = 'y', long = "yes", visible_alias = "confirm")]
    pub yes: bool,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the plugin's version and the operator's (read from its Deployment in the cluster).
    #[command(after_help = "\
Examples:
  kubectl nodewright version
  kubectl nodewright version --client-only
  kubectl nodewright version -n nodewright-system -o json")]
    Version(VersionArgs),
    /// Pause a NodeWright: nothing new starts and its unfinished stage Jobs are suspended.
    #[command(
        long_about = "Pause a NodeWright: sets the annotation nodewright.nvidia.com/pause=true. \
No new stage starts, its unfinished stage Jobs are suspended, and NodeWrights after it (by \
priority) do not move on on its unfinished nodes. `resume` undoes it.",
        after_help = "Examples:\n  kubectl nodewright pause gpu-setup\n  kubectl nodewright pause gpu-setup -y --dry-run"
    )]
    Pause(Lifecycle),
    /// Resume a paused NodeWright.
    #[command(
        long_about = "Resume a paused NodeWright: removes the annotation nodewright.nvidia.com/pause; \
its suspended Jobs continue and the rollout goes on where it stopped.",
        after_help = "Examples:\n  kubectl nodewright resume gpu-setup -y"
    )]
    Resume(Lifecycle),
    /// Disable a NodeWright: it is skipped, later NodeWrights proceed without it.
    #[command(
        long_about = "Disable a NodeWright: sets the annotation nodewright.nvidia.com/disable=true. \
The operator skips it entirely and NodeWrights after it proceed as if it did not exist. \
`enable` undoes it.",
        after_help = "Examples:\n  kubectl nodewright disable gpu-setup -y"
    )]
    Disable(Lifecycle),
    /// Enable a disabled NodeWright.
    #[command(after_help = "Examples:\n  kubectl nodewright enable gpu-setup -y")]
    Enable(Lifecycle),
    /// Reset a NodeWright on every node: its packages run again from the start.
    #[command(
        long_about = "Reset a NodeWright on every node that has its state: removes the node \
annotations nodewright.nvidia.com/nodeState_<name>, status_<name> (and the label), version_<name>, \
releases its cordon, and (unless --skip-batch-reset) resets its batch state so the rollout starts \
again at batch 1. Every package then runs again from `apply` on every node, through the budget.",
        after_help = "Examples:\n  kubectl nodewright reset gpu-setup --dry-run\n  kubectl nodewright reset gpu-setup -y --skip-batch-reset"
    )]
    Reset(ResetArgs),
    /// DeploymentPolicy batch state of a NodeWright.
    #[command(
        name = "deployment-policy",
        visible_alias = "dp",
        subcommand,
        after_help = "Examples:\n  kubectl nodewright deployment-policy reset gpu-setup\n  kubectl nodewright dp reset gpu-setup -y"
    )]
    DeploymentPolicy(DpCommand),
    /// Nodes: list, status, reset, ignore, unignore.
    #[command(
        subcommand,
        after_help = "Examples:\n  kubectl nodewright node list --nodewright gpu-setup\n  kubectl nodewright node status node-7 -o wide\n  kubectl nodewright node reset node-7 --nodewright gpu-setup -y"
    )]
    Node(NodeCommand),
    /// Packages: status, rerun, logs.
    #[command(
        subcommand,
        after_help = "Examples:\n  kubectl nodewright package status driver --nodewright gpu-setup\n  kubectl nodewright package rerun driver --nodewright gpu-setup --node node-7\n  kubectl nodewright package logs driver --nodewright gpu-setup --node node-7"
    )]
    Package(PackageCommand),
    /// Preview a rollout: which nodes, in which compartment and batch, which stages, which
    /// disruption.
    #[command(
        long_about = "Preview the rollout of a NodeWright as the operator will run it, computed by \
the operator's own pure planner: which nodes are selected and which are ignored or blocked and \
why (a taint not tolerated, the ignore label, paused, held back by an earlier NodeWright), the \
compartment and batch each node falls in under its DeploymentPolicy (or legacy budget), the \
budget ceiling, the stages that will run on each node, and which nodes are cordoned, drained and \
rebooted. With -f, the NodeWright (and any DeploymentPolicy) in FILE is previewed instead of the \
one in the cluster: what applying the change would do. The preview assumes every stage it starts \
succeeds; a stage that already timed out stays timed out.",
        after_help = "Examples:\n  kubectl nodewright plan gpu-setup\n  kubectl nodewright plan gpu-setup -f gpu-setup.yaml -o json\n  kubectl nodewright plan -f new-nodewright.yaml -o wide"
    )]
    Plan(PlanArgs),
    /// Explain why a node or a package is not complete, and the command that clears it.
    #[command(
        long_about = "Explain, in one screen, why a NodeWright is not complete on a node (or, \
without --node, on each node that is not): the stage each unfinished package is at, the attempts \
used of the Job's backoff limit, whether the stage timed out and from which evidence \
(DeadlineExceeded, an exit code, a kubelet rejection), the first and last attempt pods with their \
reasons, the last-logs snapshot, what holds it back (a dependency, the budget, its batch, an \
earlier NodeWright, a taint, a pause) and the exact command that clears it.",
        after_help = "Examples:\n  kubectl nodewright why gpu-setup\n  kubectl nodewright why gpu-setup --node node-7\n  kubectl nodewright why gpu-setup --node node-7 --package driver -o yaml"
    )]
    Why(WhyArgs),
    /// List a NodeWright's revisions (the specs that completed on a node) and what each changed.
    #[command(
        long_about = "List the revisions the operator keeps of a NodeWright (status.revisions): \
the packages of every spec that completed on at least one node, newest last, with when it was \
recorded, its generation and what it changed against the revision before (versions, images, \
digests, and the other package fields by name). Says which revision the current spec is, or \
what it changes when it has not completed anywhere yet, and how the last automatic rollback \
(rollbackOnFailure) ended. With --revision, that revision's packages in full and what rolling \
back to it would change. The operator keeps REVISION_HISTORY_LIMIT revisions (chart: \
operator.revisionHistoryLimit, default 10).",
        after_help = "Examples:\n  kubectl nodewright history gpu-setup\n  kubectl nodewright history gpu-setup --revision 2 -o yaml"
    )]
    History(HistoryArgs),
    /// Write an earlier revision's packages back as a NodeWright's spec.
    #[command(
        long_about = "Roll a NodeWright back: write the packages of an earlier revision (default: \
the newest revision that differs from the current spec) back as its spec.packages, after showing \
what changes and asking [y/N] (-y skips the question; --dry-run shows the changes and has the API \
server validate the write, admission included, without storing it). The rest of the spec (node \
selection, policy, budget) stays as it is. The operator then brings the nodes back through the \
normal upgrade and downgrade stages, within the rollout's budget, batches and windows. The batch \
state is reset too (as `deployment-policy reset` does), so failures of the spec rolled back from \
do not stop the rollback; --keep-batch-state keeps it. The webhook refuses lowering the version of, \
or removing, a package with uninstall.enabled that is still installed: uninstall it first \
(uninstall.apply=true), then roll back.",
        after_help = "Examples:\n  kubectl nodewright rollback gpu-setup --dry-run\n  kubectl nodewright rollback gpu-setup --to-revision 2 -y"
    )]
    Rollback(RollbackArgs),
    /// Convert upstream Skyhook objects and node state to NodeWright, keeping what is installed.
    #[command(
        long_about = "Migrate from upstream Skyhook (skyhook.nvidia.com/v1alpha1): converts \
Skyhook and DeploymentPolicy objects (from the cluster, or from -f files) into NodeWright and \
DeploymentPolicy objects of nodewright.nvidia.com/v1alpha1, and copies each node's upstream \
records (annotations skyhook.nvidia.com/nodeState_<name>, status_<name>, cordon_<name>, \
version_<name>, the status label, the ignore label and the runtime-required taint) to the \
nodewright.nvidia.com/ keys, so packages already installed are not run again. Node records are \
written before the NodeWright objects are created, so the operator never sees a NodeWright \
without its history. The upstream objects and keys are left in place; stop the upstream operator \
first. Everything is checked before anything is written; --dry-run shows every change.",
        after_help = "Examples:\n  kubectl nodewright migrate-from-skyhook --dry-run\n  kubectl nodewright migrate-from-skyhook -y\n  kubectl nodewright migrate-from-skyhook -f skyhooks.yaml --skyhook gpu-setup -y"
    )]
    MigrateFromSkyhook(MigrateArgs),
    /// Print a shell completion script (bash, zsh, fish).
    #[command(
        long_about = "Print a completion script for kubectl-nodewright. Load it in the current \
shell, or install it where your shell reads completions.",
        after_help = "Examples:\n  source <(kubectl-nodewright completion bash)\n  kubectl-nodewright completion zsh > \"${fpath[1]}/_kubectl-nodewright\"\n  kubectl-nodewright completion fish > ~/.config/fish/completions/kubectl-nodewright.fish"
    )]
    Completion(CompletionArgs),
}

/// `version`.
#[derive(Debug, Args)]
pub struct VersionArgs {
    /// Only the plugin's version; do not contact the cluster.
    #[arg(long)]
    pub client_only: bool,
}

/// pause, resume, disable, enable.
#[derive(Debug, Args)]
pub struct Lifecycle {
    /// The NodeWright.
    pub name: String,
    /// Confirmation.
    #[command(flatten)]
    pub confirm: Confirm,
}

/// `reset`.
#[derive(Debug, Args)]
pub struct ResetArgs {
    /// The NodeWright.
    pub name: String,
    /// Keep the batch state (the rollout does not start again at batch 1).
    #[arg(long)]
    pub skip_batch_reset: bool,
    /// Confirmation.
    #[command(flatten)]
    pub confirm: Confirm,
}

/// `deployment-policy ...`.
#[derive(Debug, Subcommand)]
pub enum DpCommand {
    /// Reset the batch state of every compartment of a NodeWright (clears a stopped rollout).
    #[command(
        long_about = "Reset the batch state of every compartment of a NodeWright's rollout: batch \
1, no consecutive failures, not stopped. Clears a rollout that stopped because its failed batches \
reached the failure threshold; the nodes' records are not touched.",
        after_help = "Examples:\n  kubectl nodewright deployment-policy reset gpu-setup\n  kubectl nodewright dp reset gpu-setup -y"
    )]
    Reset(DpResetArgs),
}

/// `deployment-policy reset`.
#[derive(Debug, Args)]
pub struct DpResetArgs {
    /// The NodeWright.
    pub name: String,
    /// Confirmation.
    #[command(flatten)]
    pub confirm: Confirm,
}

/// `node ...`.
#[derive(Debug, Subcommand)]
pub enum NodeCommand {
    /// List nodes with their status for each NodeWright (or one).
    #[command(
        long_about = "List the nodes a NodeWright targets, or has state on, with the node's status \
as the operator recorded it and its packages complete out of the NodeWright's packages. Without \
--nodewright, every NodeWright in the cluster.",
        after_help = "Examples:\n  kubectl nodewright node list --nodewright gpu-setup\n  kubectl nodewright node list -o wide"
    )]
    List(NodeListArgs),
    /// Show every NodeWright's records on the matching nodes.
    #[command(
        long_about = "Show the NodeWright records on the nodes matching PATTERN (every node when \
none is given): one row per node and NodeWright, or (-o wide) one row per package with its \
version, stage, state, failed attempts and image. A pattern with any of . * + ? ^ $ { } [ ] | ( ) \\ \
is a regular expression matched against the whole node name; otherwise it is an exact name.",
        after_help = "Examples:\n  kubectl nodewright node status node-7\n  kubectl nodewright node status 'gpu-.*' --nodewright gpu-setup -o wide"
    )]
    Status(NodeStatusArgs),
    /// Reset a NodeWright on the matching nodes: its packages run again there.
    #[command(
        long_about = "Reset a NodeWright on the nodes matching PATTERN: removes its node state and \
status marks there and releases its cordon, so every package runs again from `apply` on those \
nodes (e.g. after repairing a node).",
        after_help = "Examples:\n  kubectl nodewright node reset node-7 --nodewright gpu-setup\n  kubectl nodewright node reset 'rack2-.*' --nodewright gpu-setup -y"
    )]
    Reset(NodeResetArgs),
    /// Make every NodeWright skip the matching nodes (label nodewright.nvidia.com/ignore=true).
    #[command(
        after_help = "Examples:\n  kubectl nodewright node ignore node-7\n  kubectl nodewright node ignore 'maint-.*' --dry-run"
    )]
    Ignore(NodePatterns),
    /// Remove the ignore label from the matching nodes.
    #[command(after_help = "Examples:\n  kubectl nodewright node unignore node-7")]
    Unignore(NodePatterns),
    /// Set one package's record on one node to a stage and state (a surgical repair).
    #[command(
        long_about = "Write the record of one package (its current version) in a node's state for \
a NodeWright: its stage and state, attempts reset to 0. Creates the record when there is none. For \
repairs: mark a package done by hand (--state complete) after fixing a node, or send it back to a \
stage. The operator takes the record as written on its next pass.",
        after_help = "Examples:\n  kubectl nodewright node update-state node-7 --nodewright gpu-setup --package driver --stage config --state complete\n  kubectl nodewright node update-state node-7 --nodewright gpu-setup --package driver --stage apply --state in_progress -y"
    )]
    UpdateState(NodeUpdateStateArgs),
}

/// `node update-state`.
#[derive(Debug, Args)]
pub struct NodeUpdateStateArgs {
    /// The node.
    pub node: String,
    /// The NodeWright whose record it is.
    #[arg(long, required = true, value_name = "NAME")]
    pub nodewright: String,
    /// The package.
    #[arg(long, required = true, value_name = "NAME")]
    pub package: String,
    /// The stage to record.
    #[arg(long, required = true, value_enum)]
    pub stage: StageArg,
    /// The state to record.
    #[arg(long, required = true, value_enum)]
    pub state: RecordState,
    /// Confirmation.
    #[command(flatten)]
    pub confirm: Confirm,
}

/// The states `node update-state` can record.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RecordState {
    /// The stage is done.
    Complete,
    /// The stage runs (again).
    #[value(name = "in_progress")]
    InProgress,
    /// The stage failed.
    Erroring,
    /// The stage was skipped.
    Skipped,
    /// Not started.
    Unknown,
}

/// `node list`.
#[derive(Debug, Args)]
pub struct NodeListArgs {
    /// Only this NodeWright.
    #[arg(long, value_name = "NAME")]
    pub nodewright: Option<String>,
}

/// `node status`.
#[derive(Debug, Args)]
pub struct NodeStatusArgs {
    /// Node names or regular expressions (default: every node).
    pub patterns: Vec<String>,
    /// Only this NodeWright's records.
    #[arg(long, value_name = "NAME")]
    pub nodewright: Option<String>,
}

/// `node reset`.
#[derive(Debug, Args)]
pub struct NodeResetArgs {
    /// Node names or regular expressions.
    #[arg(required = true)]
    pub patterns: Vec<String>,
    /// The NodeWright to reset.
    #[arg(long, required = true, value_name = "NAME")]
    pub nodewright: String,
    /// Confirmation.
    #[command(flatten)]
    pub confirm: Confirm,
}

/// `node ignore|unignore`.
#[derive(Debug, Args)]
pub struct NodePatterns {
    /// Node names or regular expressions.
    #[arg(required = true)]
    pub patterns: Vec<String>,
}

/// `package ...`.
#[derive(Debug, Subcommand)]
pub enum PackageCommand {
    /// Show a package's records on each node.
    #[command(
        after_help = "Examples:\n  kubectl nodewright package status driver --nodewright gpu-setup\n  kubectl nodewright package status driver --nodewright gpu-setup --node 'gpu-.*' -o wide"
    )]
    Status(PackageStatusArgs),
    /// Run a package again on the matching nodes (from the start, or from --stage).
    #[command(
        long_about = "Run a package again on the nodes matching --node. Without --stage its record \
is removed and it runs from `apply`; with --stage it runs again from that stage. This is also how \
a timed-out stage is cleared once its cause is fixed.",
        after_help = "Examples:\n  kubectl nodewright package rerun driver --nodewright gpu-setup --node node-7\n  kubectl nodewright package rerun driver --nodewright gpu-setup --node 'gpu-.*' --stage config -y"
    )]
    Rerun(PackageRerunArgs),
    /// Forget a package's record on the matching nodes, so it runs again from `apply` (upstream's
    /// `package reset`).
    #[command(
        long_about = "Remove the record of a package (its current version) from the node state of \
the nodes matching --node (every node that has one, without --node): the package runs again from \
`apply` there when the rollout reaches the node. The same as `package rerun` without --stage.",
        after_help = "Examples:\n  kubectl nodewright package reset driver --nodewright gpu-setup --node node-7\n  kubectl nodewright package reset driver --nodewright gpu-setup -y"
    )]
    Reset(PackageResetArgs),
    /// Print a package's stage logs (retained attempt pods, or the last-logs snapshot).
    #[command(
        long_about = "Print the logs of a package's stages: from the pods its stage Jobs kept (the \
first and last failed attempts of a timed-out stage, the attempts of a running one), one header \
per container; when those pods are gone, or hold no log, the last-logs snapshot the operator kept \
on the Job (nodewright.nvidia.com/last-logs).",
        after_help = "Examples:\n  kubectl nodewright package logs driver --nodewright gpu-setup --node node-7\n  kubectl nodewright package logs driver --nodewright gpu-setup --node node-7 --stage apply --tail 50\n  kubectl nodewright package logs driver --nodewright gpu-setup --node node-7 -f"
    )]
    Logs(PackageLogsArgs),
}

/// `package status`.
#[derive(Debug, Args)]
pub struct PackageStatusArgs {
    /// The package.
    pub package: String,
    /// Its NodeWright.
    #[arg(long, required = true, value_name = "NAME")]
    pub nodewright: String,
    /// Only nodes matching these names or regular expressions.
    #[arg(long = "node", value_name = "PATTERN")]
    pub nodes: Vec<String>,
}

/// `package rerun`.
#[derive(Debug, Args)]
pub struct PackageRerunArgs {
    /// The package.
    pub package: String,
    /// Its NodeWright.
    #[arg(long, required = true, value_name = "NAME")]
    pub nodewright: String,
    /// Nodes (names or regular expressions).
    #[arg(long = "node", required = true, value_name = "PATTERN")]
    pub nodes: Vec<String>,
    /// Run again from this stage instead of from the start.
    #[arg(long, value_enum)]
    pub stage: Option<RerunStage>,
    /// Confirmation.
    #[command(flatten)]
    pub confirm: Confirm,
}

/// `package reset`.
#[derive(Debug, Args)]
pub struct PackageResetArgs {
    /// The package.
    pub package: String,
    /// Its NodeWright.
    #[arg(long, required = true, value_name = "NAME")]
    pub nodewright: String,
    /// Nodes (names or regular expressions); none: every node with a record of the package.
    #[arg(long = "node", value_name = "PATTERN")]
    pub nodes: Vec<String>,
    /// Confirmation.
    #[command(flatten)]
    pub confirm: Confirm,
}

/// `package logs`.
#[derive(Debug, Args)]
pub struct PackageLogsArgs {
    /// The package.
    pub package: String,
    /// Its NodeWright.
    #[arg(long, required = true, value_name = "NAME")]
    pub nodewright: String,
    /// Only nodes matching this name or regular expression.
    #[arg(long = "node", value_name = "PATTERN")]
    pub node: Option<String>,
    /// Only this stage.
    #[arg(long, value_enum)]
    pub stage: Option<StageArg>,
    /// Follow the log of running containers.
    #[arg(short = 'f', long)]
    pub follow: bool,
    /// Lines from the end of each log (-1: all).
    #[arg(long, default_value_t = -1, allow_negative_numbers = true)]
    pub tail: i64,
}

/// `plan`.
#[derive(Debug, Args)]
pub struct PlanArgs {
    /// The NodeWright (optional with -f when the file holds exactly one).
    pub name: Option<String>,
    /// A manifest (YAML or JSON, several documents allowed) holding the changed NodeWright and any
    /// DeploymentPolicy it uses; `-` reads stdin.
    #[arg(short = 'f', long, value_name = "FILE")]
    pub file: Option<PathBuf>,
}

/// `why`.
#[derive(Debug, Args)]
pub struct WhyArgs {
    /// The NodeWright.
    pub name: String,
    /// The node (exact name).
    #[arg(long, value_name = "NODE")]
    pub node: Option<String>,
    /// Only this package.
    #[arg(long, value_name = "PACKAGE")]
    pub package: Option<String>,
}

/// `history`.
#[derive(Debug, Args)]
pub struct HistoryArgs {
    /// The NodeWright.
    pub name: String,
    /// Show this revision in full (its packages, and what rolling back to it changes).
    #[arg(long, value_name = "N")]
    pub revision: Option<i64>,
}

/// `rollback`.
#[derive(Debug, Args)]
pub struct RollbackArgs {
    /// The NodeWright.
    pub name: String,
    /// The revision to go back to (default: the newest one that differs from the current spec).
    #[arg(long, value_name = "N")]
    pub to_revision: Option<i64>,
    /// Keep the batch state (a rollout stopped by its failure threshold stays stopped).
    #[arg(long)]
    pub keep_batch_state: bool,
    /// Confirmation.
    #[command(flatten)]
    pub confirm: Confirm,
}

/// `migrate-from-skyhook`.
#[derive(Debug, Args)]
pub struct MigrateArgs {
    /// Read the Skyhook and DeploymentPolicy objects from these files (YAML or JSON) instead of the
    /// cluster.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub files: Vec<PathBuf>,
    /// Only these Skyhooks (default: all).
    #[arg(long = "skyhook", value_name = "NAME")]
    pub skyhooks: Vec<String>,
    /// The upstream operator's runtime-required taint (its RUNTIME_REQUIRED_TAINT): replaced on
    /// the nodes by this operator's, which NodeWrights tolerate.
    #[arg(
        long,
        default_value = "skyhook.nvidia.com=runtime-required:NoSchedule",
        value_name = "KEY=VALUE:EFFECT"
    )]
    pub skyhook_runtime_taint: String,
    /// Confirmation.
    #[command(flatten)]
    pub confirm: Confirm,
}

/// `completion`.
#[derive(Debug, Args)]
pub struct CompletionArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: Shell,
}

/// `--max-disrupted-nodes` (or `NODEWRIGHT_MAX_DISRUPTED_NODES`), checked when the command line is
/// read: a bad value is refused before any cluster is contacted, naming both ways it can be given.
fn parse_max_disrupted(text: &str) -> Result<MaxDisrupted, String> {
    MaxDisrupted::parse(text)
        .map_err(|e| format!("{e} (from --max-disrupted-nodes or NODEWRIGHT_MAX_DISRUPTED_NODES)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bad cap is a usage error when the command line is read (before any cluster is asked),
    /// naming the flag and the environment variable; a good one is parsed.
    #[test]
    fn the_disruption_cap_is_checked_when_the_command_line_is_read() {
        let Err(error) = Cli::try_parse_from([
            "kubectl-nodewright",
            "plan",
            "--max-disrupted-nodes",
            "lots",
        ]) else {
            panic!("a cap of \"lots\" was accepted");
        };
        assert_eq!(error.exit_code(), 2);
        let text = error.to_string();
        assert!(
            text.contains("NODEWRIGHT_MAX_DISRUPTED_NODES") && text.contains("\"lots\""),
            "{text}"
        );
        let cli =
            Cli::try_parse_from(["kubectl-nodewright", "plan", "--max-disrupted-nodes", "10%"])
                .expect("parsed");
        assert_eq!(
            cli.global.max_disrupted_nodes,
            Some(MaxDisrupted::Percent(10))
        );
    }
}
