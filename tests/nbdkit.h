/*
 * Test helper: nbdkit servers for the nbd backend's tests, each on a Unix
 * socket in a scratch directory and run by the test itself (nbdkit -f, a
 * child of the test, --exit-with-parent: none outlives it).  A server is
 * up once it has written its pidfile (nbdkit does when it listens).
 */
#ifndef WBC_TEST_NBDKIT_H
#define WBC_TEST_NBDKIT_H
#include "testutil.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

extern char **environ;

#define T_NBDKIT_ARGS 24

struct t_nbdkit {
	pid_t pid;
	char sock[108], pidfile[200], uri[240];
	char *argv[T_NBDKIT_ARGS + 8];
	int argc;
};

/* Is nbdkit installed (runs "nbdkit --version")? */
static inline bool t_nbdkit_available(void)
{
	char *argv[] = { "nbdkit", "--version", NULL };
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	pid_t pid;
	int st = 0;
	bool ok = !posix_spawnp(&pid, "nbdkit", &fa, NULL, argv, environ) &&
		  waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
	posix_spawn_file_actions_destroy(&fa);
	return ok;
}


/* (Re)start @s's server; it is up when this returns. */
static inline void t_nbdkit_spawn(struct t_nbdkit *s)
{
	unlink(s->sock);      /* a killed server leaves its socket behind */
	unlink(s->pidfile);
	CHECK_EQ(posix_spawnp(&s->pid, "nbdkit", NULL, NULL, s->argv, environ), 0);
	struct stat st;
	for (int i = 0; i < 20000; i++) {
		int status;
		if (waitpid(s->pid, &status, WNOHANG) == s->pid) {
			fprintf(stderr, "nbdkit exited at start (status %d)\n", status);
			exit(1);
		}
		/* nbdkit writes its pidfile once it listens */
		if (!stat(s->pidfile, &st) && st.st_size > 0 && !stat(s->sock, &st) &&
		    S_ISSOCK(st.st_mode))
			return;
		struct timespec ts = { 0, 1000 * 1000 };
		nanosleep(&ts, NULL);
	}
	fprintf(stderr, "nbdkit did not come up on %s\n", s->sock);
	exit(1);
}

/* Start nbdkit on @dir/@name.sock with @args (plugin, filters and their
 * parameters; NULL-terminated); s->uri is the device spec's URI. */
static inline void t_nbdkit_start(struct t_nbdkit *s, const char *dir, const char *name,
				  const char *const *args)
{
	memset(s, 0, sizeof(*s));
	snprintf(s->sock, sizeof(s->sock), "%s/%s.sock", dir, name);
	snprintf(s->pidfile, sizeof(s->pidfile), "%s/%s.pid", dir, name);
	snprintf(s->uri, sizeof(s->uri), "nbd+unix:///?socket=%s", s->sock);
	const char *fixed[] = { "nbdkit", "-f", "--exit-with-parent", "-U", s->sock, "-P",
				s->pidfile };
	for (size_t i = 0; i < sizeof(fixed) / sizeof(fixed[0]); i++)
		CHECK((s->argv[s->argc++] = strdup(fixed[i])));
	for (int i = 0; args[i]; i++) {
		CHECK(i < T_NBDKIT_ARGS);
		CHECK((s->argv[s->argc++] = strdup(args[i])));
	}
	s->argv[s->argc] = NULL;
	t_nbdkit_spawn(s);
}

/* Stop the server (SIGSTOP) and return once it is stopped, every thread:
 * a stop signal wakes one of its threads, which stops the others when it
 * runs; on a busy machine the others answered a request sent after
 * kill() returned. */
static inline void t_nbdkit_pause(struct t_nbdkit *s)
{
	CHECK_EQ(kill(s->pid, SIGSTOP), 0);
	int status = 0;
	CHECK_EQ(waitpid(s->pid, &status, WUNTRACED), s->pid);
	CHECK(WIFSTOPPED(status));
}

static inline void t_nbdkit_resume(struct t_nbdkit *s)
{
	CHECK_EQ(kill(s->pid, SIGCONT), 0);
}

/* Kill the server (SIGKILL: no goodbye to its clients) and reap it. */
static inline void t_nbdkit_kill(struct t_nbdkit *s)
{
	if (s->pid <= 0)
		return;
	kill(s->pid, SIGKILL);
	CHECK_EQ(waitpid(s->pid, NULL, 0), s->pid);
	s->pid = 0;
}

static inline void t_nbdkit_stop(struct t_nbdkit *s)
{
	t_nbdkit_kill(s);
	for (int i = 0; i < s->argc; i++)
		free(s->argv[i]);
	unlink(s->sock);
	unlink(s->pidfile);
	s->argc = 0;
}
#endif
