"""What each test needs to run: the ``pure``, ``process`` and ``external`` markers.

Every test gets exactly one of them, set by tests/conftest.py at collection (never by hand
in a test file), the heaviest that applies:

``pure``
    starts no process and opens no socket: the pure core, the parsers and codecs, the
    simulation's in-process runs, the Hypothesis machines of the core, regions driven by
    hand in this process.  ``make check`` runs these (``pytest -m pure``).
``process``
    starts Braid processes (or any process: ``python -m node ...``, a pytest of its own) or
    opens sockets: in-process servers on the loopback, gRPC links, local clusters.  Needs
    nothing but this virtualenv.
``external``
    needs something outside Python: Debian's redis-server / redis-cli / redis-benchmark,
    tclsh, Docker, kubectl, Java and Spark, root (network namespaces, a tmpfs).

So ``pytest -m pure`` is the fast check, ``pytest -m "not external"`` everything this
virtualenv alone can run, and ``make test`` runs all three.

How a test's kind is decided:

1. :data:`KINDS` names every test module (a new ``tests/test_*.py`` that is not in it fails
   the collection, naming it).  Its value is the kind of every test in the module, or a dict:
   ``"*"`` the kind of the module's tests that are not listed, and lists of test names
   (function names; ``Class::method`` for a class's) of each other kind.  A listed name that
   the module does not define fails the collection too, so a rename cannot leave a stale entry.
2. The fixtures a test uses (with those they use) can only make it heavier:
   :data:`PROCESS_FIXTURES` (a Braid process, an in-process server) make it at least
   ``process``, :data:`EXTERNAL_FIXTURES` (Debian's redis-server) ``external``.  A module of
   differential tests can say ``PURE`` and let its ``braid`` / ``ref`` tests be lifted.
3. A test marked ``pure`` runs under a guard (tests/purity.py): starting a process, binding
   or connecting a socket or making a gRPC server or channel fails it, naming the call.  So a
   test that belongs under ``process`` cannot hide under ``pure``; the other way round (a
   pure test left under ``process``) only costs ``make check`` that test.

The lists below were made by running every test once under that guard (a test that passed
is pure) and reading what the others need; when a test changes kind, move its name.
"""

from __future__ import annotations

PURE, PROCESS, EXTERNAL = "pure", "process", "external"
ORDER = (PURE, PROCESS, EXTERNAL)  # lighter to heavier

# conftest.py's fixtures (and node/testing.py's servers behind them); a fixture using one of
# these counts too (pytest lists a test's fixtures with the ones they use)
PROCESS_FIXTURES = frozenset({"braid_proc", "braid", "inproc"})
EXTERNAL_FIXTURES = frozenset({"redis_proc", "ref"})

KINDS: dict[str, str | dict[str, str | list[str]]] = {
    "test_acl": {
        "*": PROCESS,
        PURE: [
            "test_categories_follow_redis",
            "test_command_and_key_checks",
            "test_command_rules_keep_their_order_and_replace_earlier_ones",
            "test_default_user",
            "test_first_argument_rule",
            "test_key_patterns_and_permissions",
            "test_new_user_is_off_with_nothing",
            "test_parse_acl_file_errors",
            "test_passwords_and_hashes",
            "test_reset_and_selectors",
            "test_several_selectors_pick_the_most_relevant_denial",
        ],
    },
    "test_acl_differential": EXTERNAL,
    "test_admin_acl": PROCESS,
    "test_admin_cli": {
        "*": PROCESS,
        PURE: [
            "test_a_forced_removal_names_what_an_earlier_removed_region_loses_with_it",
        ],
    },
    "test_admin_shards": PROCESS,
    "test_shard_membership": {
        "*": PROCESS,
        PURE: [
            "test_a_new_region_needs_a_port_and_a_repl_port_per_shard",
            "test_the_simulation_changes_the_members_of_every_shard_group",
        ],
    },
    "test_admin_cli_messages": PROCESS,
    "test_admin_cli_ux": {
        "*": PROCESS,
        PURE: [
            "test_every_option_and_subcommand_has_help",
            "test_vectors_wider_than_the_console_print_as_pairs",
        ],
    },
    "test_aof": {
        "*": PURE,
        PROCESS: [
            "test_check_log_clean",
            "test_check_log_corrupt_changes_nothing_without_fix",
            "test_check_log_missing_directory",
            "test_check_log_torn_then_fix",
        ],
    },
    "test_backup": PROCESS,
    "test_bad_input": EXTERNAL,
    "test_bench_results": {
        "*": PURE,
        PROCESS: [
            "test_peers_nice_renices_every_thread_of_a_running_process",
        ],
    },
    "test_bench_wait": {
        "*": PURE,
        PROCESS: [
            "test_a_tiny_run_on_loopback_writes_both_sections",
        ],
    },
    "test_blocks": PURE,
    "test_bounds": {
        "*": PURE,
        PROCESS: [
            "test_a_write_too_large_for_one_log_record_is_refused_before_it_runs",
            "test_metadata_waiting_for_a_region_is_reported",
            "test_replies_held_for_a_failing_disk_count_against_the_output_limit",
            "test_watch_versions_are_kept_only_while_watched",
        ],
    },
    "test_causal": PURE,
    "test_certs": PURE,
    "test_chaos": {
        "*": PURE,
        PROCESS: [
            "test_a_planted_bug_fails_its_checker",
            "test_a_region_that_writes_before_its_peers_answered_is_caught_after_a_restore",
            "test_a_wait_that_counts_peers_that_did_not_acknowledge_is_caught_by_a_forced_removal",
            "test_debug_faults_reach_the_region",
            "test_debug_is_refused_unless_enabled",
            "test_live_run_with_membership_changes_passes_and_reports_them",
            "test_regions_restored_from_older_copies_of_their_folders_lose_nothing",
            "test_relay_forwards_and_partitions",
            "test_relay_one_way_hold_keeps_bytes_until_healed",
            "test_short_live_run_passes_and_reports",
            "test_sides_apart_longer_than_every_backlog_join_their_states_and_lose_nothing",
        ],
    },
    "test_chaos_shards": {
        "*": PROCESS,
        PURE: [
            "test_shards_are_refused_where_they_cannot_run",
            "test_the_seed_kills_each_shard_alone_and_a_region_whole",
        ],
    },
    "test_chaos_report_ux": {
        "*": PURE,
        PROCESS: [
            "test_the_default_report_directory_is_ignored_by_git",
        ],
    },
    "test_cli": {
        "*": PROCESS,
        PURE: [
            "test_example_cluster_file_loads",
        ],
    },
    "test_client_fairness": {
        "*": PROCESS,
        PURE: [
            "test_a_large_bulk_reply_leaves_as_itself_and_a_small_range_read_is_copied",
            "test_a_large_range_read_after_a_logged_write_in_the_same_pipeline_is_copied_in_order",
            "test_a_large_range_read_leaves_as_its_entries_encodings_in_order_with_the_other_replies",
            "test_a_large_reply_is_handed_to_the_transport_without_a_copy",
            "test_a_pipeline_waits_at_the_hold_and_goes_on_as_its_replies_are_read",
            "test_a_slice_of_pipelined_commands_runs_per_turn_and_others_are_served_in_between",
            "test_a_slice_spent_before_a_partial_command_leaves_reading_on",
            "test_a_woken_reader_past_the_hard_limit_is_closed_before_its_reply_is_written",
        ],
    },
    "test_cluster": PROCESS,
    "test_cluster_commands": {
        "*": PURE,
        EXTERNAL: [
            "test_cluster_info_fields_equal_a_real_cluster",
            "test_keyslot_equals_a_real_cluster",
            "test_routing_errors_equal_a_real_cluster",
            "test_slot_argument_errors_equal_a_real_cluster",
            "test_slots_shards_nodes_shapes_equal_a_real_cluster",
        ],
    },
    "test_command_docs": PURE,
    "test_command_table": PURE,
    "test_compiled": {
        "*": PROCESS,
        PURE: [
            "test_setup_lists_modules_that_exist",
            "test_this_process_runs_the_build_it_says",
        ],
    },
    "test_convergence": PURE,
    "test_convergence_stateful": PURE,
    "test_copy": {
        "*": PURE,
        PROCESS: [
            "test_a_copy_survives_sigkill_of_a_real_region",
            "test_a_copy_wakes_readers_blocked_on_the_destination",
        ],
    },
    "test_deploy": {
        "*": PURE,
        PROCESS: [
            "test_dockerfile_copies_what_exists_and_starts_a_region",
            "test_sharded_compose_runs_braid_node_with_options_it_knows",
        ],
        EXTERNAL: [
            "test_compose_accepts_the_compose_files",
        ],
    },
    "test_differential": EXTERNAL,
    "test_differential_hypothesis": EXTERNAL,
    "test_docker": EXTERNAL,
    "test_dump_restore": PURE,
    "test_entry_reply": PURE,
    "test_fail_stop": {
        "*": PROCESS,
        PURE: [
            "test_a_fail_stop_in_the_simulation_is_a_crash_and_the_region_comes_back",
        ],
    },
    "test_flush": {
        "*": PROCESS,
        PURE: [
            "test_a_flush_is_one_record_one_envelope_and_replays",
            "test_a_flush_of_an_empty_database_sends_nothing",
            "test_another_region_applies_a_flush_at_once_and_keeps_what_it_had_not_seen",
            "test_the_region_runs_the_flush_once_it_holds_what_it_was_asked_to_cover",
        ],
    },
    "test_fsyncthread": PURE,
    "test_full_disk": EXTERNAL,
    "test_groups_core": PURE,
    "test_idgen": PURE,
    "test_k8s": {
        "*": EXTERNAL,
        PURE: [
            "test_the_secrets_are_never_committed",
        ],
    },
    "test_large_entries": PROCESS,
    "test_launcher": {
        "*": PROCESS,
        PURE: [
            "test_a_cluster_file_names_each_region_data_folder",
            "test_up_writes_the_data_folders_into_a_cluster_file_made_before_them",
        ],
    },
    "test_launcher_options": PROCESS,
    "test_layering": {"*": PURE, PROCESS: ["test_simulation_loads_no_grpc"]},
    "test_log_damage": {
        "*": PROCESS,
        PURE: [
            "test_a_segment_out_of_place_goes_whole",
            "test_scan_reports_a_bad_tail_as_damage_only_when_closed_cleanly",
        ],
    },
    "test_lone_writes": {
        "*": PURE,
        PROCESS: [
            "test_a_restored_region_alone_withdraws_its_writes_and_issues_them_again",
            "test_without_the_setting_a_region_waits_for_every_member",
            "test_writes_taken_alone_leave_once_every_member_answered_holding_no_more",
        ],
    },
    "test_maxmemory": PROCESS,
    "test_membership": PURE,
    "test_membership_cluster": {
        "*": PROCESS,
        PURE: [
            "test_braid_admin_says_when_no_voter_ever_received_the_commit",
        ],
    },
    "test_membership_region": {
        "*": PURE,
        PROCESS: [
            "test_a_region_with_an_unreadable_promise_file_does_not_start",
        ],
    },
    "test_metrics": {
        "*": PROCESS,
        PURE: [
            "test_every_series_of_a_shard_says_which_shard_and_an_unsharded_region_has_no_such_label",
            "test_the_dashboard_filters_every_graph_by_shard_and_graphs_the_shards",
            "test_the_dashboard_parses_and_uses_only_documented_metrics",
        ],
    },
    "test_mixed_versions": EXTERNAL,
    "test_migrate": {
        "*": EXTERNAL,
        PURE: [
            "test_a_core_without_a_network_port_answers_an_error",
        ],
    },
    "test_netns": {
        "*": EXTERNAL,
        PURE: [
            "test_per_pair_delays_and_errors_are_explicit",
            "test_wan_options_are_checked",
        ],
    },
    "test_numeric_args": EXTERNAL,
    "test_opcodec": PURE,
    "test_ops": PURE,
    "test_origins": PROCESS,
    "test_out_of_memory": PROCESS,
    "test_partition_heals": PROCESS,
    "test_pel": PURE,
    "test_persistence": {
        "*": PROCESS,
        PURE: [
            "test_operations_leave_for_other_regions_once_written_or_once_durable",
            "test_replication_fsyncs_are_shared_by_records_written_close_together",
        ],
    },
    "test_pipeline": EXTERNAL,
    "test_pipeline_decode": PURE,
    "test_pipeline_shards": {
        "*": EXTERNAL,
        PURE: ["test_the_slot_map_and_sharded_offsets_are_read_as_written"],
        PROCESS: ["test_a_writer_with_a_stale_slot_map_follows_moved",
                  "test_an_unsharded_region_is_one_shard_with_offsets_as_before"],
    },
    "test_proto_stubs": PURE,
    "test_rdb": PURE,
    "test_rdb_shards": EXTERNAL,
    "test_rdb_file": {
        "*": EXTERNAL,
        PURE: [
            "test_every_option_of_import_and_export_has_help",
            "test_every_truncation_and_flipped_byte_is_a_clean_error",
            "test_every_truncation_and_flipped_byte_of_a_redis_8_10_file_is_a_clean_error",
            "test_files_without_a_checksum_and_with_a_tail",
            "test_reads_a_redis_8_6_file",
            "test_reads_redis_8_8_and_8_10_files",
            "test_refuses_what_cannot_be_read",
            "test_refuses_what_cannot_be_read_in_redis_8_8_and_8_10_files",
            "test_skips_every_encoding_and_opcode_exactly",
            "test_writer_refuses_unknown_versions_and_maps_stream_types",
        ],
    },
    "test_redis86_features": PURE,
    "test_redis_cli": EXTERNAL,
    "test_redis_stream_suite": {
        "*": EXTERNAL,
        PROCESS: [  # the two differences the suites found, without the suites (no tclsh, no download)
            "test_blocked_command_answered_with_error_counts_as_failed",
            "test_history_read_is_no_change",
        ],
    },
    "test_redispy_e2e": PURE,
    "test_region_core": PURE,
    "test_relay_hold": PURE,
    "test_replay_ops": PURE,
    "test_replay_speed": {
        "*": PROCESS,
        PURE: [
            "test_the_bulk_path_rebuilds_what_the_general_path_rebuilds",
            "test_the_replay_bound_decides_from_the_records_since_the_last_snapshot",
        ],
    },
    "test_replication_recovery": {
        "*": PURE,
        PROCESS: [
            "test_a_killed_region_takes_writes_once_its_peers_answered",
            "test_a_region_whose_machine_crashed_takes_back_its_own_operations_before_it_writes",
        ],
    },
    "test_replication_transport": {
        "*": PROCESS,
        PURE: [
            "test_a_batch_frame_is_built_once_for_the_peers_that_send_the_same_envelopes",
            "test_a_link_tells_the_hub_before_it_handles_each_frame_of_operations_of_its_peer",
            "test_a_newer_ack_waiting_for_its_interval_replaces_the_older_and_data_goes_first",
            "test_a_peer_that_reads_packed_batches_gets_them_and_each_form_is_built_once",
            "test_a_prompt_ack_does_not_wait_for_a_lazy_ones_interval",
            "test_a_third_regions_operations_are_relayed_only_while_the_peers_acks_of_it_stand_still",
            "test_an_ack_for_relays_waits_a_third_of_the_relay_delay_within_the_ack_intervals_bounds",
            "test_an_ack_never_waits_for_room_and_the_latest_one_goes_first",
            "test_an_ack_that_only_tells_a_peer_its_own_operations_arrived_may_wait",
            "test_an_image_is_taken_only_when_announced_and_as_announced",
            "test_frames_are_planned_by_bytes_and_a_large_operation_goes_in_parts",
            "test_lag_counts_unacknowledged_operations_and_their_age",
            "test_packed_batches_keep_every_field_a_protobuf_batch_can_carry",
            "test_parts_join_into_the_operation_only_when_every_rule_holds",
            "test_the_pacing_of_links_is_a_setting",
            "test_the_same_history_is_no_fork_and_an_unknown_one_is_learnt",
        ],
    },
    "test_reply_writes": PURE,
    "test_resolve": PURE,
    "test_resp_encoder": PURE,
    "test_resp_parser": PURE,
    "test_restore": PROCESS,
    "test_server_commands": {
        "*": PURE,
        PROCESS: [
            "test_auth_with_requirepass",
        ],
    },
    "test_settings_doc": {
        "*": PURE,
        PROCESS: [
            "test_the_reference_lists_exactly_what_a_region_answers_to_config_get",
        ],
    },
    "test_shard_processes": PROCESS,
    "test_shards_stateful": PURE,
    "test_sim": {
        "*": PURE,
        PROCESS: [
            "test_each_planted_bug_is_caught_by_its_checker",
        ],
    },
    "test_sim_wait": PURE,
    "test_sliced_commands": PURE,
    "test_slowlog": {
        "*": PURE,
        PROCESS: [
            "test_a_real_burst_inside_multi_leaves_a_latency_sample",
            "test_entries_name_the_client_and_a_blocked_read_is_logged_when_it_ends",
            "test_settings_from_the_cluster_file",
        ],
    },
    "test_snapshot_format": {
        "*": PURE,
        PROCESS: [
            "test_a_single_region_file_round_trips_through_a_real_restart",
            "test_a_state_with_every_feature_round_trips_exactly",
            "test_active_active_regions_round_trip_exactly",
            "test_an_active_active_pickle_converts_to_the_same_state",
            "test_an_old_pickle_snapshot_stops_the_region_until_converted",
        ],
    },
    "test_state_join": PURE,
    "test_tls_clients": {
        "*": PROCESS,
        PURE: [
            "test_cluster_file_keeps_region_settings_and_the_links_choice",
        ],
        EXTERNAL: [
            "test_braid_up_tls_prints_redis_cli_lines_that_work",
            "test_redis_cli_and_redis_py_over_tls",
        ],
    },
    "test_tls_links": PROCESS,
    "test_tour": EXTERNAL,
    "test_tour_spark": EXTERNAL,
    "test_versions": PURE,
    "test_wait": EXTERNAL,
    "test_xnack": {
        "*": PROCESS,
        PURE: [
            "test_xnack_is_region_local",
        ],
    },
    "test_xread_810": {
        "*": PROCESS,
        EXTERNAL: [
            "test_command_docs_history_and_arguments",
        ],
    },
    "test_xread_parse": PURE,
}


def kind_of(module: str, name: str, fixtures: set[str] | frozenset[str]) -> str | None:
    """The kind of test ``name`` of ``module`` using ``fixtures`` (None: the module is not in KINDS)."""
    entry = KINDS.get(module)
    if entry is None:
        return None
    if isinstance(entry, str):
        kind = entry
    else:
        kind = str(entry["*"])
        for k in ORDER:
            if name in entry.get(k, ()):
                kind = k
    if fixtures & EXTERNAL_FIXTURES:
        return EXTERNAL
    if fixtures & PROCESS_FIXTURES and kind == PURE:
        return PROCESS
    return kind


def listed_names(module: str) -> list[str]:
    """The test names KINDS lists for ``module`` (each must exist)."""
    entry = KINDS.get(module)
    if not isinstance(entry, dict):
        return []
    return [n for k in ORDER for n in entry.get(k, ())]
