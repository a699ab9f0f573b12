//! The offline suite: what runs without root and touches nothing outside temp dirs. The binary as
//! people meet it (`cli`), the installer against a fake host root (`install`), and everything the
//! project ships for Kubernetes checked without a cluster (`manifests`), the docs against the code
//! (`docs`), the floors of `src/` (`layout`), the release's version said the same everywhere
//! (`release`). `scripts/test.sh --quick` runs it with the unit tests
//! (docs/testing.md).

mod cli;
mod docs;
mod install;
mod layout;
mod manifests;
mod release;
