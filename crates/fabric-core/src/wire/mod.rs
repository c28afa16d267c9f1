//! Frame formats on bytes: parse and encode, with their CRCs. Lowest layer of the core.
