// equimus DAC board reference firmware, protocol v1 (docs/dac_board_protocol.md).
//
// Target: any Arduino-core board with native USB serial (RP2040 Pico with earlephilhower core,
// Teensy 4.x) + MCP4728 quad 12-bit I2C DAC (channels A = MAA, B = BAA, VDD = 5 V reference)
// + a x2 op-amp stage per channel to the VPPE setpoint inputs (0-10 V), and the VPPE actual-value
// outputs (0-10 V) through 10k/4.7k-style dividers (10 V -> 3.3 V) into two ADC pins.
// Untested on hardware. On this computer it builds unchanged as a program behind a pseudo-terminal
// (firmware/host/README.md): the valve driver's tests run against it, and a replay checks that it
// answers exactly as the emulator (src/equimus_hw/equimus_hw/valve/board_emulator.py) does.
#include <Wire.h>
#if defined(ARDUINO_ARCH_RP2040)
#include <hardware/watchdog.h>
#endif

static const uint8_t PROTOCOL_VERSION = 1;
static const uint8_t FW_MAJOR = 1, FW_MINOR = 0, FW_PATCH = 0;
static const uint8_t CHANNELS = 2;
static const uint8_t DAC_BITS = 12;
static const uint8_t ADC_BITS = 12;
static const uint16_t DAC_VREF_MV = 5000;
#ifndef DAC_BOARD_WATCHDOG_MS
#define DAC_BOARD_WATCHDOG_MS 200               // the rig's; a build may set another (-D)
#endif
static const uint16_t WATCHDOG_MS = DAC_BOARD_WATCHDOG_MS;
static const uint16_t MAX_CODE = 341;          // 50 kPa at 60 kPa/V, 10 V full scale, 12 bit
static const bool VENT_ON_BAD_FRAME = true;
static const uint8_t MCP4728_ADDR = 0x60;
static const uint8_t ADC_PINS[CHANNELS] = {A0, A1};

enum : uint8_t { T_HELLO = 0x01, T_PING = 0x02, T_SET = 0x03, T_ACK = 0x81, T_INFO = 0x82,
                 T_NAK = 0x83 };
enum : uint8_t { F_MEASURED = 0x01, F_WATCHDOG_VENTED = 0x02, F_FRESH_BOOT = 0x04,
                 F_BAD_FRAME_VENTED = 0x08 };
enum : uint8_t { R_BAD_COBS = 1, R_BAD_CRC = 2, R_BAD_LENGTH = 3, R_UNKNOWN_TYPE = 4,
                 R_BAD_CHANNEL_COUNT = 5, R_CODE_OUT_OF_RANGE = 6, R_OVERFLOW = 7 };

static const size_t MAX_DECODED = 64, MAX_ENCODED = 66;
static uint8_t rx[MAX_ENCODED + 1];
static size_t rx_len = 0;
static bool rx_overflow = false;
static uint16_t codes[CHANNELS];
static uint8_t flags = F_FRESH_BOOT;
static uint32_t last_set_ms = 0;

static uint16_t crc16(const uint8_t *d, size_t n) {   // CRC-16/CCITT-FALSE
  uint16_t crc = 0xFFFF;
  for (size_t i = 0; i < n; i++) {
    crc ^= (uint16_t)d[i] << 8;
    for (int b = 0; b < 8; b++) crc = (crc & 0x8000) ? (crc << 1) ^ 0x1021 : (crc << 1);
  }
  return crc;
}

// COBS decode into out (room for MAX_ENCODED bytes: n <= MAX_ENCODED encoded bytes decode to at
// most n - 1); returns the decoded length or -1 on malformed input. A decoded frame longer than
// MAX_DECODED is well-formed COBS: the caller refuses it as bad_length.
static int cobs_decode(const uint8_t *in, size_t n, uint8_t *out) {
  size_t i = 0, o = 0;
  while (i < n) {
    uint8_t code = in[i];
    if (code == 0 || i + code > n) return -1;
    for (uint8_t k = 1; k < code; k++) {
      if (in[i + k] == 0 || o >= MAX_ENCODED) return -1;
      out[o++] = in[i + k];
    }
    i += code;
    if (code < 0xFF && i < n) {
      if (o >= MAX_ENCODED) return -1;
      out[o++] = 0;
    }
  }
  return (int)o;
}

static void send_frame(uint8_t type, uint8_t seq, const uint8_t *body, size_t n) {
  uint8_t f[MAX_DECODED], enc[MAX_ENCODED + 2];
  f[0] = type; f[1] = seq;
  memcpy(f + 2, body, n);
  uint16_t crc = crc16(f, n + 2);
  f[n + 2] = crc & 0xFF; f[n + 3] = crc >> 8;
  size_t len = n + 4, o = 1, code_pos = 0;
  uint8_t code = 1;
  for (size_t i = 0; i < len; i++) {     // COBS encode (frames are < 254 bytes)
    if (f[i] == 0) { enc[code_pos] = code; code_pos = o++; code = 1; }
    else { enc[o++] = f[i]; code++; }
  }
  enc[code_pos] = code;
  enc[o++] = 0;
  Serial.write(enc, o);
}

static void dac_write(const uint16_t *c) {      // MCP4728 fast write, all four channels
  Wire.beginTransmission(MCP4728_ADDR);
  for (uint8_t ch = 0; ch < 4; ch++) {
    uint16_t v = ch < CHANNELS ? c[ch] : 0;
    if (v > MAX_CODE) v = 0;                     // last line of defence
    Wire.write((uint8_t)((v >> 8) & 0x0F));      // PD1=PD0=0 (normal), D11..D8
    Wire.write((uint8_t)(v & 0xFF));
  }
  Wire.endTransmission();
}

static void vent() {
  for (uint8_t i = 0; i < CHANNELS; i++) codes[i] = 0;
  dac_write(codes);
}

static void send_ack(uint8_t seq) {
  uint8_t b[2 + 4 * CHANNELS];
  size_t n = 0;
  b[n++] = flags | F_MEASURED;
  b[n++] = CHANNELS;
  for (uint8_t i = 0; i < CHANNELS; i++) { b[n++] = codes[i] & 0xFF; b[n++] = codes[i] >> 8; }
  for (uint8_t i = 0; i < CHANNELS; i++) {
    uint16_t a = analogRead(ADC_PINS[i]);
    b[n++] = a & 0xFF; b[n++] = a >> 8;
  }
  send_frame(T_ACK, seq, b, n);
  flags &= F_FRESH_BOOT;                          // event flags are reported once
}

static void send_nak(uint8_t seq, uint8_t reason, uint8_t detail) {
  uint8_t b[2] = {reason, detail};
  send_frame(T_NAK, seq, b, 2);
}

// Undecodable (seq 0) or CRC-valid but malformed (request's seq) frame.
static void bad_frame(uint8_t reason, uint8_t seq = 0, uint8_t detail = 0) {
  if (VENT_ON_BAD_FRAME && (codes[0] || codes[1])) { vent(); flags |= F_BAD_FRAME_VENTED; }
  send_nak(seq, reason, detail);
}

// A well-formed SET the board refuses: always vents.
static void refuse_set(uint8_t seq, uint8_t reason, uint8_t detail) {
  vent();
  flags |= F_BAD_FRAME_VENTED;
  send_nak(seq, reason, detail);
}

static void handle_frame() {
  uint8_t f[MAX_ENCODED];
  int n = cobs_decode(rx, rx_len, f);
  if (n < 0) return bad_frame(R_BAD_COBS);
  if (n < 4 || n > (int)MAX_DECODED) return bad_frame(R_BAD_LENGTH);
  uint16_t crc = f[n - 2] | (f[n - 1] << 8);
  if (crc != crc16(f, n - 2)) return bad_frame(R_BAD_CRC);
  uint8_t type = f[0], seq = f[1];
  const uint8_t *body = f + 2;
  int blen = n - 4;
  if (type == T_HELLO && blen == 0) {
    uint8_t b[14] = {PROTOCOL_VERSION, FW_MAJOR, FW_MINOR, FW_PATCH, CHANNELS, DAC_BITS,
                     ADC_BITS, VENT_ON_BAD_FRAME ? 1 : 0,
                     DAC_VREF_MV & 0xFF, DAC_VREF_MV >> 8, WATCHDOG_MS & 0xFF, WATCHDOG_MS >> 8,
                     MAX_CODE & 0xFF, MAX_CODE >> 8};
    send_frame(T_INFO, seq, b, sizeof b);
  } else if (type == T_PING && blen == 0) {
    send_ack(seq);
  } else if (type == T_SET && blen >= 1) {
    uint8_t cnt = body[0];
    if (cnt < 1 || cnt > 8) return bad_frame(R_BAD_CHANNEL_COUNT, seq);
    if (blen != 1 + 2 * cnt) return bad_frame(R_BAD_LENGTH, seq);
    if (cnt != CHANNELS) return refuse_set(seq, R_BAD_CHANNEL_COUNT, CHANNELS);
    uint16_t c[CHANNELS];
    for (uint8_t i = 0; i < CHANNELS; i++) {
      c[i] = body[1 + 2 * i] | (body[2 + 2 * i] << 8);
      if (c[i] > MAX_CODE) return refuse_set(seq, R_CODE_OUT_OF_RANGE, i);
    }
    memcpy(codes, c, sizeof codes);
    dac_write(codes);
    last_set_ms = millis();
    send_ack(seq);
    flags &= ~F_FRESH_BOOT;
  } else if (type == T_HELLO || type == T_PING || type == T_SET) {
    bad_frame(R_BAD_LENGTH, seq);
  } else {
    send_nak(seq, R_UNKNOWN_TYPE, 0);
  }
}

void setup() {
  Wire.begin();
  Wire.setClock(400000);
  vent();                                        // 0 V before anything else
  analogReadResolution(ADC_BITS);
  Serial.begin(115200);
#if defined(ARDUINO_ARCH_RP2040)
  watchdog_enable(500, true);                    // hardware watchdog: a hung loop resets to 0 V
#endif
  last_set_ms = millis();
}

void loop() {
#if defined(ARDUINO_ARCH_RP2040)
  watchdog_update();
#endif
  while (Serial.available()) {
    uint8_t b = Serial.read();
    if (b == 0) {
      if (rx_overflow) bad_frame(R_OVERFLOW);
      else if (rx_len) handle_frame();
      rx_len = 0; rx_overflow = false;
    } else if (!rx_overflow) {
      if (rx_len >= MAX_ENCODED) { rx_overflow = true; rx_len = 0; }
      else rx[rx_len++] = b;
    }
  }
  if ((codes[0] || codes[1]) && (uint32_t)(millis() - last_set_ms) > WATCHDOG_MS) {
    vent();
    flags |= F_WATCHDOG_VENTED;
  }
}
