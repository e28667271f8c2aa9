//! Starts a throwaway mariadb server for tests (owned by the issue that needs it first).
