"""Platform glue: peer credentials, systemd (LISTEN_FDS, sd_notify, transient scopes), launchd, inotify, the
journal, service install, listening sockets, and a flock taken within a bound (`flock`)."""
