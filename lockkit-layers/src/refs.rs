//! What one module takes from the others of its crate: every `use` and
//! every path (also inside macro calls) that names a module of the crate,
//! resolved to a path from the crate root.

use std::collections::{BTreeMap, BTreeSet};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::{self, Visit};
use syn::{Attribute, ImplItemFn, Item, UseTree};

use crate::tree::{Tree, only_in_tests};

/// What one module brings in by `use`, and what it names.
pub struct Scope {
    /// Names brought in by `use` that stand for paths of the crate.
    pub aliases: BTreeMap<String, Vec<String>>,
    /// Modules of the crate whose names a glob `use` brings in.
    pub globs: Vec<Vec<String>>,
    /// Names brought in from outside the crate.
    pub external: BTreeSet<String>,
    /// The paths of the crate (from its root) the module names, its
    /// `use`s among them; code that only tests compile left out.
    pub named: Vec<Vec<String>>,
}

/// The scope of module `at` of `tree`.
pub fn scope(tree: &Tree, at: usize) -> Scope {
    let mut seen = Seen::default();
    for item in &tree.modules[at].items {
        seen.visit_item(item);
    }
    let module = Resolver {
        tree,
        at,
        aliases: BTreeMap::new(),
    };
    // A `use` may name what an earlier one brought in (`use conn::Arg`
    // after `use crate::conn`): aliases are resolved in two rounds.
    let mut aliases = BTreeMap::new();
    for _ in 0..2 {
        let resolver = Resolver {
            aliases: aliases.clone(),
            ..module
        };
        aliases = seen
            .uses
            .iter()
            .filter(|(alias, _)| alias != "_" && alias != "*")
            .filter_map(|(alias, path)| Some((alias.clone(), resolver.resolve(path)?)))
            .collect();
    }
    let external = seen
        .uses
        .iter()
        .filter(|(alias, _)| !aliases.contains_key(alias))
        .map(|(alias, _)| alias.clone())
        .collect();
    let resolver = Resolver { aliases, ..module };
    let globs = seen
        .uses
        .iter()
        .filter(|(alias, _)| alias == "*")
        .filter_map(|(_, p)| resolver.resolve(p))
        .collect();
    let named = seen
        .uses
        .iter()
        .map(|(_, p)| p)
        .chain(&seen.paths)
        .filter_map(|p| resolver.resolve(p))
        .collect();
    Scope {
        aliases: resolver.aliases,
        globs,
        external,
        named,
    }
}

/// The raw paths one module's items write.
#[derive(Default)]
struct Seen {
    /// `use` paths: the name each brings in (`*` for a glob) and the path.
    uses: Vec<(String, Vec<String>)>,
    /// Paths of two or more segments outside `use`.
    paths: Vec<Vec<String>>,
}

impl<'ast> Visit<'ast> for Seen {
    fn visit_item(&mut self, item: &'ast Item) {
        if !only_in_tests(attrs(item)) {
            visit::visit_item(self, item);
        }
    }

    fn visit_impl_item_fn(&mut self, f: &'ast ImplItemFn) {
        if !only_in_tests(&f.attrs) {
            visit::visit_impl_item_fn(self, f);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if u.leading_colon.is_none() {
            expand(&u.tree, &mut Vec::new(), &mut self.uses);
        }
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() && p.segments.len() > 1 {
            self.paths
                .push(p.segments.iter().map(|s| s.ident.to_string()).collect());
        }
        visit::visit_path(self, p);
    }

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        scan(m.tokens.clone(), &mut self.paths);
        visit::visit_macro(self, m);
    }
}

/// The attributes of an item, for the kinds that can carry `#[cfg(test)]`.
fn attrs(item: &Item) -> &[Attribute] {
    match item {
        Item::Const(i) => &i.attrs,
        Item::Enum(i) => &i.attrs,
        Item::Fn(i) => &i.attrs,
        Item::Impl(i) => &i.attrs,
        Item::Macro(i) => &i.attrs,
        Item::Mod(i) => &i.attrs,
        Item::Static(i) => &i.attrs,
        Item::Struct(i) => &i.attrs,
        Item::Trait(i) => &i.attrs,
        Item::Type(i) => &i.attrs,
        Item::Use(i) => &i.attrs,
        _ => &[],
    }
}

/// Flattens a `use` tree into (name brought in, whole path) pairs.
fn expand(tree: &UseTree, prefix: &mut Vec<String>, out: &mut Vec<(String, Vec<String>)>) {
    match tree {
        UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            expand(&p.tree, prefix, out);
            prefix.pop();
        }
        UseTree::Name(n) => {
            let name = n.ident.to_string();
            if name == "self" {
                if let Some(last) = prefix.last() {
                    out.push((last.clone(), prefix.clone()));
                }
            } else {
                let mut path = prefix.clone();
                path.push(name.clone());
                out.push((name, path));
            }
        }
        UseTree::Rename(r) => {
            let mut path = prefix.clone();
            if r.ident != "self" {
                path.push(r.ident.to_string());
            }
            out.push((r.rename.to_string(), path));
        }
        UseTree::Glob(_) => out.push(("*".into(), prefix.clone())),
        UseTree::Group(g) => {
            for t in &g.items {
                expand(t, prefix, out);
            }
        }
    }
}

/// Collects the `a::b::c` paths written inside a macro call's tokens.
fn scan(tokens: TokenStream, out: &mut Vec<Vec<String>>) {
    let mut current: Vec<String> = Vec::new();
    // Colons seen since the last identifier (two make a `::`).
    let mut colons = 0;
    for tt in tokens {
        match tt {
            TokenTree::Ident(i) => {
                if colons != 2 {
                    flush(&mut current, out);
                }
                current.push(i.to_string());
                colons = 0;
            }
            TokenTree::Punct(p) if p.as_char() == ':' && colons < 2 && !current.is_empty() => colons += 1,
            TokenTree::Group(g) => {
                flush(&mut current, out);
                colons = 0;
                scan(g.stream(), out);
            }
            _ => {
                flush(&mut current, out);
                colons = 0;
            }
        }
    }
    flush(&mut current, out);
}

/// Keeps `current` in `out` if it is a path of two or more segments;
/// empties it.
fn flush(current: &mut Vec<String>, out: &mut Vec<Vec<String>>) {
    if current.len() > 1 {
        out.push(std::mem::take(current));
    }
    current.clear();
}

/// Turns the paths written in one module into paths from the crate root.
#[derive(Clone)]
struct Resolver<'t> {
    tree: &'t Tree,
    at: usize,
    /// Names brought in by `use`, with the paths they stand for.
    aliases: BTreeMap<String, Vec<String>>,
}

impl Resolver<'_> {
    /// The path from the crate root that `path` names, or `None` when it
    /// names something outside the crate (or an item of this module).
    fn resolve(&self, path: &[String]) -> Option<Vec<String>> {
        let here = &self.tree.modules[self.at];
        let (first, rest) = path.split_first()?;
        let mut base = match first.as_str() {
            "crate" => Vec::new(),
            "self" => here.path.clone(),
            "super" => {
                let mut base = here.path.clone();
                base.pop()?;
                let mut rest = rest;
                while let Some(("super", tail)) = rest.split_first().map(|(s, t)| (s.as_str(), t)) {
                    base.pop()?;
                    rest = tail;
                }
                base.extend(rest.iter().cloned());
                return Some(base);
            }
            name if here.children.contains_key(name) => {
                let mut base = here.path.clone();
                base.push(name.to_owned());
                base
            }
            name => self.aliases.get(name)?.clone(),
        };
        base.extend(rest.iter().cloned());
        Some(base)
    }
}
