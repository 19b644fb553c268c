//! `dependsOn`: every dependency names a package of this NodeWright at its exact version, and the
//! dependencies form no cycle.
//!
//! A package starts on a node only once its dependencies are complete there. A dependency that does
//! not exist, or a cycle (including a package depending on itself), therefore means packages that
//! never start: upstream admitted cycles and deadlocked at runtime (DESIGN §9). Cycles are found with
//! strongly connected components, then one shortest cycle is reported through every package not yet
//! covered by a reported cycle, so each package in a cycle appears in at least one message, each
//! cycle is reported once, and the work stays bounded however the graph is shaped.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use nodewright_shared::api::Package;

use super::findings::{Findings, Path, child};

/// At most this many cycles are spelled out; the rest are summarised in one more message.
const MAX_CYCLES: usize = 10;

/// Checks the `dependsOn` of every package (keyed by package name).
pub fn check(packages: &BTreeMap<String, Package>, f: &mut Findings) {
    // In name order (the map's), so a dependency's index is found by binary search.
    let entries: Vec<(&str, &Package)> = packages.iter().map(|(k, p)| (k.as_str(), p)).collect();
    let mut edges: Vec<Vec<usize>> = vec![Vec::new(); entries.len()];
    let packages_path = Path::Root("spec.packages");

    for (from, (key, package)) in entries.iter().enumerate() {
        let package_path = packages_path.child(key);
        let base = package_path.child("dependsOn");
        for (dep, version) in &package.depends_on {
            let path = base.child(dep);
            let target = entries
                .binary_search_by(|(name, _)| (*name).cmp(dep.as_str()))
                .ok()
                .map(|to| (to, entries[to].1));
            if version.is_empty() {
                let hint = target
                    .map(|(_, t)| format!(" (this NodeWright has {dep} {})", t.version))
                    .unwrap_or_default();
                f.error(
                    &path,
                    format!(
                        "the version of {dep:?} is empty: write the exact version of {dep} this package needs{hint}"
                    ),
                );
                continue;
            }
            match target {
                Some((to, t)) if t.version == *version => edges[from].push(to),
                Some((_, t)) => f.error(
                    &path,
                    format!(
                        "depends on \"{dep}|{version}\", which is not in this NodeWright (it has \"{dep}|{have}\"): set the dependency to {have:?}, or change the version of {dep}",
                        have = t.version
                    ),
                ),
                None => f.error(
                    &path,
                    format!(
                        "depends on \"{dep}|{version}\", but there is no package {dep:?} in this NodeWright: add it to spec.packages or remove this entry"
                    ),
                ),
            }
        }
    }
    // Most dependency graphs have no cycle: one depth-first pass says so, and only a graph with a
    // cycle is taken apart to name them.
    if !has_cycle(&edges) {
        return;
    }
    for e in &mut edges {
        e.sort_unstable();
        e.dedup();
    }
    let names: Vec<&str> = entries.iter().map(|(name, _)| *name).collect();
    report_cycles(&names, &edges, f);
}

/// Whether the graph has a cycle (a self-loop included): an iterative depth-first search that
/// meets a vertex still on its path.
fn has_cycle(edges: &[Vec<usize>]) -> bool {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        New,
        OnPath,
        Done,
    }
    let mut mark = vec![Mark::New; edges.len()];
    let mut stack: Vec<(usize, usize)> = Vec::new();
    for root in 0..edges.len() {
        if mark[root] != Mark::New {
            continue;
        }
        mark[root] = Mark::OnPath;
        stack.push((root, 0));
        while let Some((v, next)) = stack.pop() {
            match edges[v].get(next) {
                Some(&w) => {
                    stack.push((v, next + 1));
                    match mark[w] {
                        Mark::OnPath => return true,
                        Mark::New => {
                            mark[w] = Mark::OnPath;
                            stack.push((w, 0));
                        }
                        Mark::Done => {}
                    }
                }
                None => mark[v] = Mark::Done,
            }
        }
    }
    false
}

/// Reports the cycles of the graph `edges` over `names` (both in name order, so deterministic).
fn report_cycles(names: &[&str], edges: &[Vec<usize>], f: &mut Findings) {
    let component = strongly_connected(edges);
    let mut size = vec![0usize; names.len()];
    for &c in &component {
        size[c] += 1;
    }
    let cyclic = |v: usize| size[component[v]] > 1 || edges[v].contains(&v);

    let mut covered = vec![false; names.len()];
    let mut cycles: BTreeSet<Vec<usize>> = BTreeSet::new();
    let mut left_out: Vec<&str> = Vec::new();
    for v in 0..names.len() {
        if !cyclic(v) || covered[v] {
            continue;
        }
        if cycles.len() >= MAX_CYCLES {
            left_out.push(names[v]);
            continue;
        }
        let Some(cycle) = shortest_cycle_through(v, edges, &component) else {
            continue;
        };
        for &u in &cycle {
            covered[u] = true;
        }
        cycles.insert(canonical(cycle));
    }
    for cycle in &cycles {
        let mut spelled: Vec<&str> = cycle.iter().map(|&v| names[v]).collect();
        let first = spelled[0];
        spelled.push(first);
        let path = child(&child("spec.packages", first), "dependsOn");
        let what = if cycle.len() == 1 {
            format!(
                "{first} depends on itself, so it could never start; remove that dependsOn entry"
            )
        } else {
            "these packages wait for each other, so none of them could ever start; remove one of these dependsOn entries".to_owned()
        };
        f.error(
            path,
            format!("dependency cycle: {}: {what}", spelled.join(" -> ")),
        );
    }
    if !left_out.is_empty() {
        f.error(
            "spec.packages",
            format!(
                "dependency cycle: {} more package(s) are in dependency cycles not listed here: {}; remove dependsOn entries until no package (indirectly) depends on itself",
                left_out.len(),
                super::findings::short_list(&left_out, MAX_CYCLES)
            ),
        );
    }
}

/// Rotates a cycle to start at its smallest vertex, so each cycle has one spelling.
fn canonical(mut cycle: Vec<usize>) -> Vec<usize> {
    if let Some(start) = (0..cycle.len()).min_by_key(|&i| cycle[i]) {
        cycle.rotate_left(start);
    }
    cycle
}

/// The shortest cycle through `start` inside its component (breadth-first, neighbours in name order),
/// as the list of vertices from `start`.
fn shortest_cycle_through(
    start: usize,
    edges: &[Vec<usize>],
    component: &[usize],
) -> Option<Vec<usize>> {
    if edges[start].contains(&start) {
        return Some(vec![start]);
    }
    let mut parent: Vec<Option<usize>> = vec![None; edges.len()];
    let mut seen = vec![false; edges.len()];
    let mut queue = VecDeque::from([start]);
    seen[start] = true;
    while let Some(u) = queue.pop_front() {
        for &w in &edges[u] {
            if w == start {
                let mut path = vec![u];
                let mut at = u;
                while let Some(p) = parent[at] {
                    path.push(p);
                    at = p;
                }
                path.reverse();
                return Some(path);
            }
            if !seen[w] && component[w] == component[start] {
                seen[w] = true;
                parent[w] = Some(u);
                queue.push_back(w);
            }
        }
    }
    None
}

/// Strongly connected components (Kosaraju, iterative so that a long dependency chain cannot
/// overflow the stack): the component id of every vertex.
fn strongly_connected(edges: &[Vec<usize>]) -> Vec<usize> {
    let n = edges.len();
    // Pass 1: vertices in order of DFS completion.
    let mut order = Vec::with_capacity(n);
    let mut visited = vec![false; n];
    for root in 0..n {
        if visited[root] {
            continue;
        }
        visited[root] = true;
        let mut stack = vec![(root, 0usize)];
        while let Some((v, next)) = stack.pop() {
            if let Some(&w) = edges[v].get(next) {
                stack.push((v, next + 1));
                if !visited[w] {
                    visited[w] = true;
                    stack.push((w, 0));
                }
            } else {
                order.push(v);
            }
        }
    }
    // Pass 2: on the reversed graph, in reverse completion order.
    let mut reversed = vec![Vec::new(); n];
    for (v, targets) in edges.iter().enumerate() {
        for &w in targets {
            reversed[w].push(v);
        }
    }
    let mut component = vec![usize::MAX; n];
    let mut next_id = 0;
    for &root in order.iter().rev() {
        if component[root] != usize::MAX {
            continue;
        }
        component[root] = next_id;
        let mut stack = vec![root];
        while let Some(v) = stack.pop() {
            for &w in &reversed[v] {
                if component[w] == usize::MAX {
                    component[w] = next_id;
                    stack.push(w);
                }
            }
        }
        next_id += 1;
    }
    component
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Packages as `(name, version, [(dependency, version)])`.
    type Spec<'a> = &'a [(&'a str, &'a str, &'a [(&'a str, &'a str)])];

    /// The packages of a spec.
    fn packages(spec: Spec<'_>) -> BTreeMap<String, Package> {
        spec.iter()
            .map(|(name, version, deps)| {
                let package = Package {
                    version: (*version).to_owned(),
                    image: format!("ghcr.io/example/{name}"),
                    depends_on: deps
                        .iter()
                        .map(|(d, v)| ((*d).to_owned(), (*v).to_owned()))
                        .collect(),
                    ..Package::default()
                };
                ((*name).to_owned(), package)
            })
            .collect()
    }

    fn lines(spec: Spec<'_>) -> Vec<String> {
        let mut f = Findings::default();
        check(&packages(spec), &mut f);
        f.finish().errors.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn accepted_graphs() {
        let cases: [Spec<'static>; 4] = [
            &[],
            &[("aa", "1.0.0", &[])],
            &[("aa", "1.0.0", &[]), ("bb", "1.0.0", &[("aa", "1.0.0")])],
            // A diamond is not a cycle.
            &[
                ("aa", "1", &[]),
                ("bb", "1", &[("aa", "1")]),
                ("cc", "1", &[("aa", "1")]),
                ("dd", "1", &[("bb", "1"), ("cc", "1")]),
            ],
        ];
        for spec in cases {
            assert_eq!(lines(spec), Vec::<String>::new(), "{spec:?}");
        }
    }

    #[test]
    fn rejected_graphs() {
        let cases: [(Spec<'static>, &str); 7] = [
            (
                &[("tools", "1.0.0", &[("tools", "1.0.0")])],
                "spec.packages.tools.dependsOn: dependency cycle: tools -> tools: tools depends on itself",
            ),
            (
                &[
                    ("aa", "1.0.0", &[("bb", "1.0.0")]),
                    ("bb", "1.0.0", &[("aa", "1.0.0")]),
                ],
                "spec.packages.aa.dependsOn: dependency cycle: aa -> bb -> aa: these packages wait for each other",
            ),
            (
                &[
                    ("cc", "1", &[("aa", "1")]),
                    ("aa", "1", &[("bb", "1")]),
                    ("bb", "1", &[("cc", "1")]),
                ],
                "spec.packages.aa.dependsOn: dependency cycle: aa -> bb -> cc -> aa",
            ),
            (
                &[
                    ("app", "1.0.0", &[("tools", "2.0.0")]),
                    ("tools", "1.0.0", &[]),
                ],
                "spec.packages.app.dependsOn.tools: depends on \"tools|2.0.0\", which is not in this NodeWright (it has \"tools|1.0.0\")",
            ),
            (
                &[("app", "1.0.0", &[("tools", "1.0.0")])],
                "spec.packages.app.dependsOn.tools: depends on \"tools|1.0.0\", but there is no package \"tools\"",
            ),
            (
                &[("app", "1.0.0", &[("tools", "")]), ("tools", "1.0.0", &[])],
                "spec.packages.app.dependsOn.tools: the version of \"tools\" is empty: write the exact version of tools this package needs (this NodeWright has tools 1.0.0)",
            ),
            // Versions are compared as written, as upstream: 1.0 is not 1.0.0.
            (
                &[
                    ("app", "1.0.0", &[("tools", "1.0")]),
                    ("tools", "1.0.0", &[]),
                ],
                "depends on \"tools|1.0\", which is not in this NodeWright",
            ),
        ];
        for (spec, want) in cases {
            let got = lines(spec);
            assert!(
                got.iter().any(|l| l.starts_with(want) || l.contains(want)),
                "{want:?} not in {got:?}"
            );
        }
    }

    #[test]
    fn each_cycle_once_and_all_members_covered() {
        // aa <-> bb, aa <-> cc (one component, two cycles), dd -> dd, and ee -> aa (not in a cycle).
        let got = lines(&[
            ("aa", "1", &[("bb", "1"), ("cc", "1")]),
            ("bb", "1", &[("aa", "1")]),
            ("cc", "1", &[("aa", "1")]),
            ("dd", "1", &[("dd", "1")]),
            ("ee", "1", &[("aa", "1")]),
        ]);
        let cycles: Vec<&String> = got
            .iter()
            .filter(|l| l.contains("dependency cycle"))
            .collect();
        assert_eq!(cycles.len(), 3, "{got:?}");
        assert!(cycles[0].contains("aa -> bb -> aa"), "{got:?}");
        assert!(cycles[1].contains("aa -> cc -> aa"), "{got:?}");
        assert!(cycles[2].contains("dd -> dd"), "{got:?}");
        assert!(!got.iter().any(|l| l.contains("ee ->")), "{got:?}");
    }

    #[test]
    fn a_missing_dependency_is_not_a_cycle() {
        // tools depends on itself at another version: missing, not a cycle.
        let got = lines(&[("tools", "1.0.0", &[("tools", "0.9.0")])]);
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].contains("not in this NodeWright"), "{got:?}");
    }

    #[test]
    fn huge_graphs_stay_bounded() {
        // A ring of 5000 packages and 50 self-loops: one ring message, MAX_CYCLES in total, one summary.
        let n = 5000;
        let name = |i: usize| format!("p{i:05}");
        let mut pkgs = BTreeMap::new();
        for i in 0..n {
            let mut p = Package {
                version: "1".to_owned(),
                image: "img".to_owned(),
                ..Package::default()
            };
            p.depends_on.insert(name((i + 1) % n), "1".to_owned());
            pkgs.insert(name(i), p);
        }
        for i in 0..50 {
            let mut p = Package {
                version: "1".to_owned(),
                image: "img".to_owned(),
                ..Package::default()
            };
            p.depends_on.insert(format!("s{i:02}"), "1".to_owned());
            pkgs.insert(format!("s{i:02}"), p);
        }
        let mut f = Findings::default();
        check(&pkgs, &mut f);
        let v = f.finish();
        assert_eq!(v.errors.len(), MAX_CYCLES + 1, "{}", v.message().len());
        assert!(
            v.errors
                .iter()
                .any(|e| e.message.contains("41 more package(s)")),
            "{:?}",
            v.errors.last()
        );
    }
}
