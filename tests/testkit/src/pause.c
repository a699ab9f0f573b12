/* The pod sandbox's one process for tests/cri.rs: holds the pod's namespaces while the sandbox
 * lives, like the kubelet's pause image. As PID 1 of the pod it reaps orphans, and it exits on
 * SIGTERM or SIGINT (PID 1 has no default action for them). Built with `gcc -static`. */
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) {
  (void)sig;
  _exit(0);
}

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(void) {
  struct sigaction stop_action = {.sa_handler = stop};
  struct sigaction reap_action = {.sa_handler = reap, .sa_flags = SA_RESTART | SA_NOCLDSTOP};
  sigaction(SIGTERM, &stop_action, NULL);
  sigaction(SIGINT, &stop_action, NULL);
  sigaction(SIGCHLD, &reap_action, NULL);
  for (;;) {
    pause();
  }
}
