"""Platform glue: peer credentials, systemd (LISTEN_FDS, sd_notify, transient scopes), launchd and inotify."""
