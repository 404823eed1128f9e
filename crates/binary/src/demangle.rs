//! Symbol names as people read them: Itanium C++ and Rust demangling.

/// The demangled form of `name`, or None when it is not a mangled name.
pub fn demangle(name: &str) -> Option<String> {
    if (name.starts_with("_R") || name.starts_with("_ZN") && name.ends_with('E'))
        && let Ok(rust) = rustc_demangle::try_demangle(name)
    {
        let text = format!("{rust:#}");
        if text != name {
            return Some(text);
        }
    }
    if name.starts_with("_Z") {
        let symbol = cpp_demangle::Symbol::new(name).ok()?;
        return symbol.demangle().ok();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::demangle;

    #[test]
    fn demangles_cpp_and_leaves_c_alone() {
        assert_eq!(demangle("_ZN3foo3barEv").as_deref(), Some("foo::bar()"));
        assert_eq!(demangle("main"), None);
    }
}
