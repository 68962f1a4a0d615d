// Host shim of the Arduino core: just what the DAC board firmware uses (firmware/host/README.md).
// The firmware is compiled unchanged against it; host_main.cpp implements it (Serial on a
// pseudo-terminal or the lock-step channel, millis() from CLOCK_MONOTONIC or the replay's clock,
// analogRead from the values the host side supplies).
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

// Analog pin numbers as on the classic cores; the shim maps A0.. to ADC channels 0..
static const uint8_t A0 = 14, A1 = 15, A2 = 16, A3 = 17;

uint32_t millis(void);
int analogRead(uint8_t pin);
void analogReadResolution(int bits);

class HardwareSerial {
 public:
  void begin(unsigned long baud);
  int available();
  int read();
  size_t write(uint8_t b);
  size_t write(const uint8_t *data, size_t n);
  void flush() {}
  explicit operator bool() const { return true; }
};

extern HardwareSerial Serial;

void setup(void);
void loop(void);
