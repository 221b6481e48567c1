//! Proto comments → rustdoc attributes.

use proc_macro2::TokenStream;
use prost_build::Comments;
use quote::quote;

/// `#[doc = ...]` attributes for an item's leading and trailing proto comments, or
/// `fallback` when it has none (every generated public item is documented, so users
/// who deny `missing_docs` only have to allow it for prost's messages).
///
/// The text goes through prost-build's own sanitizer (`Comments::append_with_indent`:
/// bare URLs become `<...>`, stray `[..]` are escaped), so service docs render the
/// same way as message docs. Detached comments (`//` lines) are not documentation.
pub(crate) fn doc_attrs(comments: &Comments, fallback: &str) -> TokenStream {
    let mut rendered = String::new();
    comments.append_with_indent(0, &mut rendered);
    let lines: Vec<&str> = rendered
        .lines()
        .filter_map(|line| line.strip_prefix("///"))
        .collect();
    if lines.is_empty() {
        let fallback = format!(" {fallback}");
        return quote!(#[doc = #fallback]);
    }
    quote!(#(#[doc = #lines])*)
}

/// A single `#[doc = ...]` line for items that have no proto counterpart.
pub(crate) fn doc(text: &str) -> TokenStream {
    let text = format!(" {text}");
    quote!(#[doc = #text])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_and_trailing_comments_become_docs() {
        let comments = Comments {
            leading_detached: vec![vec![" license".into()]],
            leading: vec![" Sends a greeting.".into()],
            trailing: vec![" See https://example.com".into()],
        };
        let docs = doc_attrs(&comments, "unused").to_string();
        assert!(docs.contains("\" Sends a greeting.\""), "{docs}");
        assert!(docs.contains("<https://example.com>"), "{docs}");
        assert!(!docs.contains("license"), "{docs}");
        assert!(!docs.contains("unused"), "{docs}");
    }

    #[test]
    fn no_comments_uses_the_fallback() {
        let docs = doc_attrs(&Comments::default(), "Calls `X`.").to_string();
        assert!(docs.contains("\" Calls `X`.\""), "{docs}");
    }
}
