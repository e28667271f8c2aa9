//! Starts a throwaway etcd server for tests (owned by the issue that needs it first).
