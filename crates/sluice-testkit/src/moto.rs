//! Starts a throwaway moto server for tests (owned by the issue that needs it first).
