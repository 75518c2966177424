//! A crate's module tree, read from its root file and the `mod`
//! declarations below it, each module with the file that holds it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::{Attribute, Item};

use crate::error::LayersError;

/// One module: its path from the crate root, the file it is written in
/// and the items written in it (an inline module's are its own).
pub struct Module {
    /// Segments from the crate root (empty for the root).
    pub path: Vec<String>,
    /// The file that holds it.
    pub file: PathBuf,
    /// Its items, nested modules left out (they are modules of their own).
    pub items: Vec<Item>,
    /// Its child modules by name: indices into [`Tree::modules`].
    pub children: BTreeMap<String, usize>,
    /// The names its own items define (types, functions, constants,
    /// traits, macros), `use` left out.
    pub defined: BTreeSet<String>,
}

/// Every module of one crate root (`src/lib.rs` or `src/main.rs`).
pub struct Tree {
    /// The modules, the root first.
    pub modules: Vec<Module>,
}

impl Tree {
    /// Reads the tree below `root`, leaving out `#[cfg(test)]` modules.
    pub fn read(root: &Path) -> Result<Tree, LayersError> {
        let mut tree = Tree { modules: Vec::new() };
        let dir = root.parent().unwrap_or(Path::new(".")).to_path_buf();
        let items = parse(root)?.items;
        tree.add(Vec::new(), root.to_path_buf(), dir, items)?;
        Ok(tree)
    }

    /// The deepest module along `path`: the module an item at `path` is in
    /// (or the module `path` names).
    pub fn deepest(&self, path: &[String]) -> usize {
        let mut at = 0;
        for seg in path {
            match self.modules[at].children.get(seg) {
                Some(&child) => at = child,
                None => break,
            }
        }
        at
    }

    /// Adds the module at `path` written in `file` with `items`, whose
    /// child modules' files are under `dir`; its index.
    fn add(&mut self, path: Vec<String>, file: PathBuf, dir: PathBuf, items: Vec<Item>) -> Result<usize, LayersError> {
        let at = self.modules.len();
        self.modules.push(Module {
            path: path.clone(),
            file: file.clone(),
            items: Vec::new(),
            children: BTreeMap::new(),
            defined: BTreeSet::new(),
        });
        let mut own = Vec::new();
        for item in items {
            let Item::Mod(m) = item else {
                own.push(item);
                continue;
            };
            if only_in_tests(&m.attrs) {
                continue;
            }
            let name = m.ident.to_string();
            let mut child_path = path.clone();
            child_path.push(name.clone());
            let child = match m.content {
                Some((_, inner)) => self.add(child_path, file.clone(), dir.join(&name), inner)?,
                None => {
                    let child_file = match path_attr(&m.attrs) {
                        Some(p) => dir.join(p),
                        None => module_file(&dir, &name)?,
                    };
                    let child_dir = child_dir(&child_file);
                    let inner = parse(&child_file)?.items;
                    self.add(child_path, child_file, child_dir, inner)?
                }
            };
            self.modules[at].children.insert(name, child);
        }
        self.modules[at].defined = own.iter().filter_map(defined_name).collect();
        self.modules[at].items = own;
        Ok(at)
    }
}

/// The name an item defines, if it defines one.
fn defined_name(item: &Item) -> Option<String> {
    let ident = match item {
        Item::Const(i) => &i.ident,
        Item::Enum(i) => &i.ident,
        Item::Fn(i) => &i.sig.ident,
        Item::Macro(i) => i.ident.as_ref()?,
        Item::Static(i) => &i.ident,
        Item::Struct(i) => &i.ident,
        Item::Trait(i) => &i.ident,
        Item::TraitAlias(i) => &i.ident,
        Item::Type(i) => &i.ident,
        Item::Union(i) => &i.ident,
        _ => return None,
    };
    Some(ident.to_string())
}

/// Whether `attrs` hold `#[cfg(test)]`: code that only tests compile.
pub fn only_in_tests(attrs: &[Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.meta
                .require_list()
                .is_ok_and(|l| l.tokens.to_string().trim() == "test")
    })
}

/// The `#[path = "…"]` of a module declaration.
fn path_attr(attrs: &[Attribute]) -> Option<String> {
    attrs.iter().find(|a| a.path().is_ident("path")).and_then(|a| {
        let syn::Meta::NameValue(nv) = &a.meta else { return None };
        let syn::Expr::Lit(syn::ExprLit {
            lit: syn::Lit::Str(s), ..
        }) = &nv.value
        else {
            return None;
        };
        Some(s.value())
    })
}

/// The file of module `name` declared in a file whose modules live in `dir`.
fn module_file(dir: &Path, name: &str) -> Result<PathBuf, LayersError> {
    let flat = dir.join(format!("{name}.rs"));
    if flat.is_file() {
        return Ok(flat);
    }
    let nested = dir.join(name).join("mod.rs");
    if nested.is_file() {
        return Ok(nested);
    }
    Err(LayersError::NoModuleFile {
        module: name.to_owned(),
        dir: dir.to_path_buf(),
    })
}

/// Where the modules declared in `file` live: beside it for `mod.rs`,
/// `lib.rs` and `main.rs`, in a folder named for it otherwise.
fn child_dir(file: &Path) -> PathBuf {
    let parent = file.parent().unwrap_or(Path::new(".")).to_path_buf();
    match file.file_stem().and_then(|s| s.to_str()) {
        Some("mod" | "lib" | "main") | None => parent,
        Some(stem) => parent.join(stem),
    }
}

/// Parses one source file.
fn parse(file: &Path) -> Result<syn::File, LayersError> {
    let text = std::fs::read_to_string(file).map_err(|source| LayersError::Read {
        file: file.to_path_buf(),
        source,
    })?;
    syn::parse_file(&text).map_err(|e| LayersError::Parse {
        file: file.to_path_buf(),
        message: e.to_string(),
    })
}
