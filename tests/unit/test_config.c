/*
 * test_config.c: settings come from defaults, a file, the environment and flags, in that order of
 * precedence, and bad values are refused with a message naming the setting.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "config.h"
#include "egress_settings.h"

#include <arpa/inet.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char conf_path[64];

static int setup(void **state)
{
    (void)state;
    unsetenv("SBX_CONFIG");
    unsetenv("SBX_LISTEN");
    unsetenv("SBX_POOL_SIZE");
    unsetenv("SBX_DATA_DIR");
    snprintf(conf_path, sizeof conf_path, "/tmp/sbx-test-config-XXXXXX");
    int fd = mkstemp(conf_path);
    assert_true(fd >= 0);
    close(fd);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    unlink(conf_path);
    return 0;
}

static void write_conf(const char *text)
{
    FILE *f = fopen(conf_path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void test_defaults(void **state)
{
    (void)state;
    struct sbx_config cfg;
    char err[256];
    char *argv[] = {"sbx", NULL};
    char cwd[400], expect[600];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(config_load(&cfg, 1, argv, err, sizeof err), 0);
    /* Relative paths are made absolute at start: jails and children must not depend on chdir. */
    snprintf(expect, sizeof expect, "%s/data", strcmp(cwd, "/") == 0 ? "" : cwd);
    assert_string_equal(cfg.data_dir, expect);
    assert_string_equal(cfg.listen, "127.0.0.1:8080");
    assert_string_equal(cfg.driver, "process");
    assert_int_equal(cfg.pool_size, 2);
    snprintf(expect, sizeof expect, "%s/data/sbx.db", strcmp(cwd, "/") == 0 ? "" : cwd);
    assert_string_equal(cfg.db_path, expect);
    snprintf(expect, sizeof expect, "%s/data/jail", strcmp(cwd, "/") == 0 ? "" : cwd);
    assert_string_equal(cfg.chroot_base, expect);
    assert_string_equal(cfg.synchronous, "FULL");
}

static void test_flag_beats_env_beats_file(void **state)
{
    (void)state;
    struct sbx_config cfg;
    char err[256];

    write_conf("# comment\nlisten = 127.0.0.1:9001\npool_size = 5\ndata_dir = /tmp/from-file\n");
    setenv("SBX_LISTEN", "127.0.0.1:9002", 1);
    char a0[] = "sbx", a1[] = "--config", a3[] = "--listen=127.0.0.1:9003";
    char *argv[] = {a0, a1, conf_path, a3, NULL};
    assert_int_equal(config_load(&cfg, 4, argv, err, sizeof err), 0);
    assert_string_equal(cfg.listen, "127.0.0.1:9003"); /* flag */
    assert_int_equal(cfg.pool_size, 5);                /* file */
    assert_string_equal(cfg.db_path, "/tmp/from-file/sbx.db");
    /* Consumed flags are cleared for the caller. */
    assert_null(argv[1]);
    assert_null(argv[2]);
    assert_null(argv[3]);

    char *argv2[] = {a0, a1, conf_path, NULL};
    assert_int_equal(config_load(&cfg, 3, argv2, err, sizeof err), 0);
    assert_string_equal(cfg.listen, "127.0.0.1:9002"); /* env beats file */
    unsetenv("SBX_LISTEN");
}

static void test_bad_values_are_refused(void **state)
{
    (void)state;
    struct sbx_config cfg;
    char err[256];
    char a0[] = "sbx", a1[] = "--pool-size", a2[] = "many";
    char *argv[] = {a0, a1, a2, NULL};
    assert_int_equal(config_load(&cfg, 3, argv, err, sizeof err), -1);
    assert_non_null(strstr(err, "pool_size"));

    write_conf("no_such_setting = 1\n");
    setenv("SBX_CONFIG", conf_path, 1);
    char *argv2[] = {a0, NULL};
    assert_int_equal(config_load(&cfg, 1, argv2, err, sizeof err), -1);
    assert_non_null(strstr(err, "no_such_setting"));
    unsetenv("SBX_CONFIG");

    setenv("SBX_POOL_SIZE", "-3", 1);
    assert_int_equal(config_load(&cfg, 1, argv2, err, sizeof err), -1);
    assert_non_null(strstr(err, "SBX_POOL_SIZE"));
    unsetenv("SBX_POOL_SIZE");
}

/* The Apps' quota defaults are no bound until set; a default Workspace size above the largest
 * one allowed would refuse every create without sizeMib, so it is refused at start. */
static void test_quota_and_disk_settings(void **state)
{
    (void)state;
    struct sbx_config cfg;
    char err[256];
    char a0[] = "sbx";
    char *argv[] = {a0, NULL};
    assert_int_equal(config_load(&cfg, 1, argv, err, sizeof err), 0);
    assert_int_equal(cfg.quota_sessions, 0);
    assert_int_equal(cfg.quota_keep_alive_seconds, 0);
    assert_int_equal(cfg.workspace_max_mib, 65536);
    assert_int_equal(cfg.disk_reserve_mib, 1024);
    setenv("SBX_QUOTA_SESSIONS", "100", 1);
    assert_int_equal(config_load(&cfg, 1, argv, err, sizeof err), 0);
    assert_int_equal(cfg.quota_sessions, 100);
    unsetenv("SBX_QUOTA_SESSIONS");

    setenv("SBX_WORKSPACE_MAX_MIB", "512", 1);
    assert_int_equal(config_load(&cfg, 1, argv, err, sizeof err), -1);
    assert_non_null(strstr(err, "workspace_max_mib"));
    setenv("SBX_WORKSPACE_SIZE_MIB", "512", 1);
    assert_int_equal(config_load(&cfg, 1, argv, err, sizeof err), 0);
    unsetenv("SBX_WORKSPACE_MAX_MIB");
    unsetenv("SBX_WORKSPACE_SIZE_MIB");
}

/* egress_ports and dns_resolvers refused at start with the reason; the resolvers'
 * default is the host's public nameservers only. */
static void test_egress_settings(void **state)
{
    (void)state;
    struct sbx_config cfg;
    char err[256];
    char a0[] = "sbx";
    char *argv[] = {a0, NULL};
    static const struct {
        const char *env, *value, *reason;
    } bad[] = {
        {"SBX_DNS_RESOLVERS", "dns.example.com", "is not an IPv4 address"},
        {"SBX_DNS_RESOLVERS", "2001:db8::53", "is not an IPv4 address"},
        {"SBX_DNS_RESOLVERS", "10.0.0.53", "blocked private range 10.0.0.0/8"},
        {"SBX_DNS_RESOLVERS", "127.0.0.53", "blocked special range"},
        {"SBX_DNS_RESOLVERS", "1.1.1.1,", "comma-separated IPv4"},
        {"SBX_EGRESS_PORTS", "80,http", "ports 1..65535"},
        {"SBX_EGRESS_PORTS", "0", "ports 1..65535"},
        {"SBX_EGRESS_PORTS", "65536", "ports 1..65535"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv(bad[i].env, bad[i].value, 1);
        if (config_load(&cfg, 1, argv, err, sizeof err) != -1)
            fail_msg("%s=%s was accepted", bad[i].env, bad[i].value);
        if (!strstr(err, bad[i].reason))
            fail_msg("%s=%s: %s", bad[i].env, bad[i].value, err);
        unsetenv(bad[i].env);
    }
    setenv("SBX_DNS_RESOLVERS", "9.9.9.9,1.1.1.1,9.9.9.9", 1);
    setenv("SBX_EGRESS_PORTS", "443,80,443", 1);
    assert_int_equal(config_load(&cfg, 1, argv, err, sizeof err), 0);
    struct egress_settings s;
    assert_int_equal(
        egress_settings_parse(cfg.egress_ports, cfg.dns_resolvers, &s, err, sizeof err), 0);
    assert_int_equal(s.nports, 2);
    assert_int_equal(s.nresolvers, 2);
    assert_false(s.resolvers_from_host);
    unsetenv("SBX_DNS_RESOLVERS");
    unsetenv("SBX_EGRESS_PORTS");

    /* The default: resolv.conf's public nameservers; a stub on loopback and a private one are no
     * use to a Sandbox. */
    write_conf("# a host\nnameserver 127.0.0.53\nnameserver 192.168.1.1\nnameserver 9.9.9.9\n"
               "search example.com\nnameserver 2001:4860:4860::8888\nnameserver 1.1.1.1 # b\n");
    assert_int_equal(egress_settings_load("80,443", "", conf_path, &s, err, sizeof err), 0);
    assert_true(s.resolvers_from_host);
    assert_int_equal(s.nresolvers, 2);
    char a[INET_ADDRSTRLEN];
    assert_string_equal(inet_ntop(AF_INET, &s.resolvers[0], a, sizeof a), "9.9.9.9");
    assert_string_equal(inet_ntop(AF_INET, &s.resolvers[1], a, sizeof a), "1.1.1.1");
    char text[512];
    assert_int_equal(egress_resolv_conf_text(&s, text, sizeof text), 0);
    assert_non_null(strstr(text, "nameserver 9.9.9.9\nnameserver 1.1.1.1\n"));
    write_conf("nameserver 127.0.0.53\n");
    assert_int_equal(egress_settings_load("80,443", "", conf_path, &s, err, sizeof err), 0);
    assert_int_equal(s.nresolvers, 0); /* DNS refused; the worker says so once */
    assert_int_equal(egress_settings_load("80,443", "none", conf_path, &s, err, sizeof err), 0);
    assert_int_equal(s.nresolvers, 0);
    assert_false(s.resolvers_from_host);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_defaults, setup, teardown),
        cmocka_unit_test_setup_teardown(test_flag_beats_env_beats_file, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_values_are_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_quota_and_disk_settings, setup, teardown),
        cmocka_unit_test_setup_teardown(test_egress_settings, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
