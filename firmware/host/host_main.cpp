// Host shim for the DAC board firmware: runs firmware/dac_board/dac_board.ino, compiled unchanged,
// as a Linux program ("host firmware"). See firmware/host/README.md.
//
// What the shim provides, and nothing more:
//   Serial  the board's USB serial: a pseudo-terminal (real time) or the lock-step channel.
//   millis  CLOCK_MONOTONIC since start (real time) or the clock the lock-step driver sets.
//   Wire    an I2C bus with an MCP4728 quad DAC at 0x60 that decodes the fast-write transaction
//           into four channel codes, reported as `dac` events.
//   analog  analogRead(A0 + i) returns the ADC code the host side last supplied for channel i.
//
// Host side ("world") channel, with --world (real time) or --lockstep: commands on stdin, one per
// line; events on stdout, one per line, each loop pass that produced any ending in `end`:
//   commands  adc <code0> <code1> ...     ADC codes of channels 0.. (the valves' read-back)
//             drop <n>                    drop the next n bytes read from the pty (real time)
//             corrupt <n>                 flip one bit in each of the next n frames (real time)
//             stall <0|1>                 hung firmware: input swallowed, loop() not called
//             boot <t_ms>                 lock-step: set the clock, run setup()
//             step <t_ms> <hex|->         lock-step: set the clock, deliver bytes, run loop()
//   events    pty <path>                  real time: the slave the host opens (first line;
//                                         `error <what>` instead if it could not start)
//             rx <t> <hex>                bytes the firmware's Serial received
//             tx <t> <hex>                bytes the firmware wrote to Serial
//             dac <t> <a> <b> <c> <d>     an MCP4728 write: the four output codes (0 if powered
//                                         down)
//             i2c <t> <addr> <hex>        an I2C transaction the bus could not deliver
//             gap <t> <s>                 real time: the loop's passes were <s> seconds apart
//                                         (more than 20 ms: this process was not scheduled)
// <t> is seconds: CLOCK_MONOTONIC (Python's time.monotonic()) in real time, the lock-step clock
// otherwise. stdin at EOF ends a --world or --lockstep process.
#include <Arduino.h>
#include <Wire.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include <string>
#include <vector>

HardwareSerial Serial;
TwoWire Wire;

namespace {

const uint8_t MCP4728_ADDR = 0x60;
const int ADC_CHANNELS = 4;

bool lockstep = false;
bool world = false;
bool stalled = false;
uint32_t step_ms = 0;      // lock-step clock
uint64_t start_ns = 0;     // real-time clock origin of millis()
int master_fd = -1, slave_fd = -1;
std::string link_path;
std::vector<uint8_t> rx;  // bytes the firmware has not read yet
size_t rx_pos = 0;
uint16_t adc[ADC_CHANNELS] = {0, 0, 0, 0};
uint16_t dac[4] = {0, 0, 0, 0};
uint32_t drop_next = 0, corrupt_next = 0;
int corrupt_at = -1, corrupt_bit = 0;
size_t frame_pos = 0;
uint64_t rng = 0x9E3779B97F4A7C15ull;
std::string events;
volatile sig_atomic_t stop_requested = 0;

uint64_t mono_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double now_s() { return lockstep ? step_ms / 1000.0 : mono_ns() / 1e9; }

uint32_t next_random() {  // xorshift64*: the fault injector's only randomness, seeded by --seed
  rng ^= rng >> 12;
  rng ^= rng << 25;
  rng ^= rng >> 27;
  return (uint32_t)((rng * 2685821657736338717ull) >> 32);
}

void hex_append(std::string &s, const uint8_t *d, size_t n) {
  static const char digits[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    s += digits[d[i] >> 4];
    s += digits[d[i] & 0x0F];
  }
}

void event(const char *name, const uint8_t *d, size_t n) {
  if (!world) return;
  char head[48];
  snprintf(head, sizeof head, "%s %.6f ", name, now_s());
  events += head;
  hex_append(events, d, n);
  events += '\n';
}

// Real time: events the host side has not read yet. The loop never waits for it to read (a
// board's loop does not wait on the host's scheduler): stdout is non-blocking, and what does not
// fit in the pipe waits here for the next pass.
std::string unread;

// As much of `unread` as the pipe takes now.
void drain_events() {
  while (!unread.empty()) {
    ssize_t n = write(1, unread.data(), unread.size());
    if (n > 0) {
      unread.erase(0, (size_t)n);
    } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      return;
    } else {
      stop_requested = 1;  // the host side is gone
      return;
    }
  }
}

// One loop pass's events as a batch; `force` ends a lock-step reply even when it is empty.
void flush_events(bool force) {
  if (!world || (events.empty() && !force)) return;
  events += "end\n";
  if (lockstep) {
    if (fwrite(events.data(), 1, events.size(), stdout) != events.size() || fflush(stdout) != 0)
      stop_requested = 1;  // the host side is gone
  } else {
    unread += events;
    drain_events();
  }
  events.clear();
}

// Passes of the real-time loop further apart than this are reported (`gap`): it polls every
// 1 ms, so a longer gap is this process's own starvation, which the host side then allows for.
const uint64_t LOOP_GAP_NS = 20000000ull;

void gap_event(uint64_t gap_ns) {
  if (!world) return;
  char line[64];
  snprintf(line, sizeof line, "gap %.6f %.6f\n", now_s(), gap_ns / 1e9);
  events += line;
}

// Bytes that arrived on the serial line, after the injected faults, into the firmware's buffer.
void deliver(const uint8_t *d, size_t n) {
  std::vector<uint8_t> got;
  got.reserve(n);
  for (size_t i = 0; i < n; i++) {
    uint8_t b = d[i];
    if (drop_next) {
      drop_next--;
      continue;
    }
    if (b == 0) {
      frame_pos = 0;
      corrupt_at = -1;
    } else {
      if (frame_pos == 0 && corrupt_next) {  // every frame is at least 5 encoded bytes
        corrupt_next--;
        corrupt_at = (int)(next_random() % 4);
        corrupt_bit = (int)(next_random() % 8);
      }
      if ((int)frame_pos == corrupt_at) {
        uint8_t f = b ^ (uint8_t)(1u << corrupt_bit);
        if (f == 0) f = b ^ (uint8_t)(1u << ((corrupt_bit + 1) % 8));  // a 0x00 would split it
        b = f;
        corrupt_at = -1;
      }
      frame_pos++;
    }
    got.push_back(b);
  }
  if (got.empty()) return;
  rx.insert(rx.end(), got.begin(), got.end());
  event("rx", got.data(), got.size());
}

bool parse_hex(const char *s, std::vector<uint8_t> &out) {
  if (strcmp(s, "-") == 0) return true;
  size_t n = strlen(s);
  if (n % 2) return false;
  for (size_t i = 0; i < n; i += 2) {
    char pair[3] = {s[i], s[i + 1], 0};
    char *end;
    long v = strtol(pair, &end, 16);
    if (*end) return false;
    out.push_back((uint8_t)v);
  }
  return true;
}

void run_loop_pass() {
  loop();
  if (rx_pos) {
    rx.erase(rx.begin(), rx.begin() + (long)rx_pos);
    rx_pos = 0;
  }
}

// One command line from the host side; false for an unknown or malformed command.
bool command(char *line) {
  char *save = nullptr;
  char *word = strtok_r(line, " \t\r\n", &save);
  if (!word) return true;
  std::string cmd = word;
  auto arg = [&]() { return strtok_r(nullptr, " \t\r\n", &save); };
  if (cmd == "adc") {
    for (int i = 0; i < ADC_CHANNELS; i++) {
      char *v = arg();
      if (!v) break;
      adc[i] = (uint16_t)strtoul(v, nullptr, 10);
    }
  } else if (cmd == "drop") {
    char *v = arg();
    if (!v) return false;
    drop_next += (uint32_t)strtoul(v, nullptr, 10);
  } else if (cmd == "corrupt") {
    char *v = arg();
    if (!v) return false;
    corrupt_next += (uint32_t)strtoul(v, nullptr, 10);
  } else if (cmd == "stall") {
    char *v = arg();
    if (!v) return false;
    stalled = strcmp(v, "0") != 0;
  } else if (lockstep && (cmd == "boot" || cmd == "step")) {
    char *t = arg();
    if (!t) return false;
    step_ms = (uint32_t)strtoul(t, nullptr, 10);
    if (cmd == "boot") {
      setup();
    } else {
      std::vector<uint8_t> bytes;
      char *h = arg();
      if (!h || !parse_hex(h, bytes)) return false;
      if (!bytes.empty()) deliver(bytes.data(), bytes.size());
      run_loop_pass();
    }
    flush_events(true);
  } else {
    return false;
  }
  return true;
}

void on_signal(int) { stop_requested = 1; }

// A start-up failure in one line: on stdout as `error <what>` for the host side, else on stderr.
int fail(const std::string &what) {
  if (world) {
    printf("error %s\n", what.c_str());
    fflush(stdout);
  } else {
    fprintf(stderr, "dac_board_host: %s\n", what.c_str());
  }
  return -1;
}

int open_pty() {
  if (openpty(&master_fd, &slave_fd, nullptr, nullptr, nullptr) != 0)
    return fail(std::string("cannot open a pseudo-terminal: ") + strerror(errno));
  termios tio;
  tcgetattr(slave_fd, &tio);
  cfmakeraw(&tio);  // no echo or line editing before the host opens it
  tcsetattr(slave_fd, TCSANOW, &tio);
  fcntl(master_fd, F_SETFL, fcntl(master_fd, F_GETFL) | O_NONBLOCK);
  const char *path = ttyname(slave_fd);
  if (!link_path.empty()) {
    std::string tmp = link_path + "." + std::to_string(getpid()) + ".tmp";
    unlink(tmp.c_str());
    if (symlink(path, tmp.c_str()) != 0 || rename(tmp.c_str(), link_path.c_str()) != 0)
      return fail("cannot create the link " + link_path + ": " + strerror(errno));
  }
  if (world) {
    printf("pty %s\n", path);
  } else {
    printf("DAC board host firmware on %s%s%s%s\n", path, link_path.empty() ? "" : " (link ",
           link_path.c_str(), link_path.empty() ? "" : ")");
  }
  fflush(stdout);
  return 0;
}

void remove_link() {
  if (link_path.empty() || slave_fd < 0) return;
  char target[256];
  ssize_t n = readlink(link_path.c_str(), target, sizeof target - 1);
  if (n <= 0) return;
  target[n] = 0;
  const char *ours = ttyname(slave_fd);
  if (ours && strcmp(target, ours) == 0) unlink(link_path.c_str());
}

int run_realtime() {
  if (open_pty() != 0) return 2;
  start_ns = mono_ns();
  setup();
  flush_events(false);
  std::string pending;  // a partial command line
  uint8_t buf[4096];
  if (world) fcntl(1, F_SETFL, fcntl(1, F_GETFL) | O_NONBLOCK);  // after the blocking `pty` line
  uint64_t last_pass = mono_ns();
  while (!stop_requested) {
    pollfd fds[3] = {{master_fd, POLLIN, 0}, {0, POLLIN, 0}, {1, POLLOUT, 0}};
    int r = poll(fds, world ? (unread.empty() ? 2 : 3) : 1, 1);
    if (r < 0 && errno != EINTR) break;
    uint64_t now = mono_ns();
    if (now - last_pass > LOOP_GAP_NS) gap_event(now - last_pass);
    last_pass = now;
    if (!unread.empty()) drain_events();
    if (world && (fds[1].revents & (POLLIN | POLLHUP))) {
      ssize_t n = read(0, buf, sizeof buf);
      if (n <= 0) break;  // the host side closed the channel: power off
      pending.append((const char *)buf, (size_t)n);
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        std::string line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        if (!command(&line[0])) fprintf(stderr, "dac_board_host: bad command: %s\n", line.c_str());
      }
    }
    if (fds[0].revents & POLLIN) {
      ssize_t n = read(master_fd, buf, sizeof buf);
      if (n > 0 && !stalled) deliver(buf, (size_t)n);
    }
    if (!stalled) run_loop_pass();
    flush_events(false);
  }
  if (!unread.empty()) {  // the last events, waited for now that the loop has ended
    fcntl(1, F_SETFL, fcntl(1, F_GETFL) & ~O_NONBLOCK);
    drain_events();
  }
  remove_link();
  return 0;
}

int run_lockstep() {
  char *line = nullptr;
  size_t cap = 0;
  while (!stop_requested && getline(&line, &cap, stdin) > 0) {
    std::string copy = line;
    if (!command(line)) {
      fprintf(stderr, "dac_board_host: bad command: %s", copy.c_str());
      free(line);
      return 2;
    }
  }
  free(line);
  return 0;
}

void usage() {
  fprintf(stderr,
          "usage: dac_board_host [--link PATH] [--world] [--seed N]\n"
          "       dac_board_host --lockstep\n"
          "Runs the DAC board firmware on a pseudo-terminal (see firmware/host/README.md).\n");
}

}  // namespace

// ----------------------------------------------------------------------------- Arduino API

uint32_t millis(void) {
  return lockstep ? step_ms : (uint32_t)((mono_ns() - start_ns) / 1000000ull);
}

int analogRead(uint8_t pin) {
  int ch = (int)pin - (int)A0;
  return ch >= 0 && ch < ADC_CHANNELS ? adc[ch] : 0;
}

void analogReadResolution(int) {}

void HardwareSerial::begin(unsigned long) {}

int HardwareSerial::available() { return (int)(rx.size() - rx_pos); }

int HardwareSerial::read() { return rx_pos < rx.size() ? rx[rx_pos++] : -1; }

size_t HardwareSerial::write(uint8_t b) { return write(&b, 1); }

size_t HardwareSerial::write(const uint8_t *data, size_t n) {
  event("tx", data, n);
  size_t done = 0;
  while (master_fd >= 0 && done < n) {  // a full buffer or no reader drops bytes, as a UART does
    ssize_t w = ::write(master_fd, data + done, n - done);
    if (w <= 0) break;
    done += (size_t)w;
  }
  return n;
}

void TwoWire::beginTransmission(uint8_t address) {
  address_ = address;
  len_ = 0;
  overrun_ = false;
}

size_t TwoWire::write(uint8_t b) {
  if (len_ >= sizeof buf_) {  // the Arduino Wire buffer is 32 bytes
    overrun_ = true;
    return 0;
  }
  buf_[len_++] = b;
  return 1;
}

uint8_t TwoWire::endTransmission(bool) {
  bool fast_write = len_ >= 2;
  for (size_t i = 0; i < len_; i += 2) fast_write = fast_write && (buf_[i] & 0xC0) == 0;
  if (address_ != MCP4728_ADDR || overrun_ || !fast_write || len_ % 2 || len_ > 8) {
    // Only the MCP4728 fast write is modelled; anything else is reported, not guessed at.
    if (world) {
      char head[48];
      snprintf(head, sizeof head, "i2c %.6f %02x ", now_s(), address_);
      events += head;
      hex_append(events, buf_, len_);
      events += '\n';
    }
    return address_ != MCP4728_ADDR ? 2 : 0;
  }
  for (size_t ch = 0; ch < len_ / 2; ch++) {
    uint8_t hi = buf_[2 * ch], lo = buf_[2 * ch + 1];
    bool powered_down = (hi >> 4) & 0x03;  // PD1 PD0: output pulled to ground
    dac[ch] = powered_down ? 0 : (uint16_t)(((hi & 0x0F) << 8) | lo);
  }
  if (world) {
    char line[96];
    snprintf(line, sizeof line, "dac %.6f %u %u %u %u\n", now_s(), dac[0], dac[1], dac[2], dac[3]);
    events += line;
  }
  return 0;
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--link" && i + 1 < argc) {
      link_path = argv[++i];
    } else if (a == "--world") {
      world = true;
    } else if (a == "--lockstep") {
      lockstep = world = true;
    } else if (a == "--seed" && i + 1 < argc) {
      rng = strtoull(argv[++i], nullptr, 10) * 2 + 1;
    } else if (a == "-h" || a == "--help") {
      usage();
      return 0;
    } else {
      fprintf(stderr, "dac_board_host: unknown argument %s\n", a.c_str());
      usage();
      return 2;
    }
  }
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa = {};
  sa.sa_handler = on_signal;  // no SA_RESTART: poll() returns at once
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  return lockstep ? run_lockstep() : run_realtime();
}
