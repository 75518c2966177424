//! The files of a crate as a graph, an arrow from each file to every
//! other file it takes a name from, and its cycles (strongly connected
//! parts of more than one file).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::PathBuf;

use crate::refs::{Scope, scope};
use crate::tree::Tree;

/// Files that take names from each other in a circle.
#[derive(Debug, PartialEq, Eq)]
pub struct Cycle {
    /// The files, sorted.
    pub files: Vec<PathBuf>,
    /// The arrows between them: from, to, and the names taken.
    pub arrows: Vec<(PathBuf, PathBuf, BTreeSet<String>)>,
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "a cycle of {} files:", self.files.len())?;
        for (from, to, names) in &self.arrows {
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            writeln!(f, "  {} -> {}: {}", from.display(), to.display(), names.join(", "))?;
        }
        Ok(())
    }
}

/// The arrows of `tree`: for each file, the files it names and what.
fn arrows(tree: &Tree) -> BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<String>>> {
    let scopes: Vec<Scope> = (0..tree.modules.len()).map(|at| scope(tree, at)).collect();
    let mut out: BTreeMap<PathBuf, BTreeMap<PathBuf, BTreeSet<String>>> = BTreeMap::new();
    for (module, scope) in tree.modules.iter().zip(&scopes) {
        let from = out.entry(module.file.clone()).or_default();
        for path in &scope.named {
            let mut passed = Vec::new();
            let Some(target) = locate(tree, &scopes, path, 0, &mut passed) else {
                continue;
            };
            let name = path.last().cloned().unwrap_or_else(|| "crate".into());
            for at in passed.into_iter().chain([target]) {
                let file = &tree.modules[at].file;
                if *file != module.file {
                    from.entry(file.clone()).or_default().insert(name.clone());
                }
            }
        }
    }
    out
}

/// The module that defines what `path` (from the crate root) names,
/// following `use`s (re-exports and imports alike) to the definition;
/// `None` for a name brought in from outside the crate. The modules below
/// the crate root whose `use` the name passed through go to `passed`: a
/// file that takes a name through a folder's `mod.rs` depends on that
/// `mod.rs` too (the crate root's re-exports are the crate's face, and
/// every module is below it).
fn locate(tree: &Tree, scopes: &[Scope], path: &[String], depth: usize, passed: &mut Vec<usize>) -> Option<usize> {
    let at = tree.deepest(path);
    let rest = &path[tree.modules[at].path.len()..];
    let Some(name) = rest.first() else { return Some(at) };
    let (module, scope) = (&tree.modules[at], &scopes[at]);
    // Past a few hops it is a `use` loop the compiler would refuse.
    if module.defined.contains(name) || depth > 8 {
        return Some(at);
    }
    if let Some(target) = scope.aliases.get(name) {
        if at != 0 {
            passed.push(at);
        }
        let mut next = target.clone();
        next.extend(rest[1..].iter().cloned());
        return locate(tree, scopes, &next, depth + 1, passed);
    }
    if scope.external.contains(name) {
        return None;
    }
    for glob in &scope.globs {
        let g = tree.deepest(glob);
        let has = |m: usize| {
            tree.modules[m].defined.contains(name)
                || tree.modules[m].children.contains_key(name)
                || scopes[m].aliases.contains_key(name)
        };
        if tree.modules[g].path.len() == glob.len() && has(g) {
            if at != 0 {
                passed.push(at);
            }
            let mut next = glob.clone();
            next.extend(rest.iter().cloned());
            return locate(tree, scopes, &next, depth + 1, passed);
        }
    }
    Some(at)
}

/// The cycles among the files of `tree` (Tarjan's strongly connected
/// components, those of two or more files).
pub fn cycles(tree: &Tree) -> Vec<Cycle> {
    let arrows = arrows(tree);
    let files: Vec<&PathBuf> = arrows.keys().collect();
    let index: BTreeMap<&PathBuf, usize> = files.iter().enumerate().map(|(i, f)| (*f, i)).collect();
    let next: Vec<Vec<usize>> = files
        .iter()
        .map(|f| arrows[*f].keys().filter_map(|t| index.get(t).copied()).collect())
        .collect();
    components(&next)
        .into_iter()
        .filter(|c| c.len() > 1)
        .map(|c| {
            let members: BTreeSet<&PathBuf> = c.iter().map(|&i| files[i]).collect();
            let arrows = members
                .iter()
                .flat_map(|from| {
                    arrows[*from]
                        .iter()
                        .filter(|(to, _)| members.contains(to))
                        .map(|(to, names)| ((*from).clone(), to.clone(), names.clone()))
                })
                .collect();
            Cycle {
                files: members.into_iter().cloned().collect(),
                arrows,
            }
        })
        .collect()
}

/// Tarjan's algorithm over `next` (the successors of each node), without
/// recursion: the strongly connected components.
fn components(next: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = next.len();
    let (mut index, mut low, mut on_stack) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut stack, mut out, mut counter) = (Vec::new(), Vec::new(), 0);
    for start in 0..n {
        if index[start] != usize::MAX {
            continue;
        }
        // Frames of the depth-first walk: a node and its next successor.
        let mut walk = vec![(start, 0)];
        index[start] = counter;
        low[start] = counter;
        counter += 1;
        stack.push(start);
        on_stack[start] = true;
        while let Some(&mut (v, ref mut i)) = walk.last_mut() {
            if let Some(&w) = next[v].get(*i) {
                *i += 1;
                if index[w] == usize::MAX {
                    index[w] = counter;
                    low[w] = counter;
                    counter += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    walk.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            walk.pop();
            if let Some(&(parent, _)) = walk.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                out.push(component);
            }
        }
    }
    out
}
