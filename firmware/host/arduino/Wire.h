// Host shim of the Arduino Wire (I2C) library with an MCP4728 quad DAC on the bus (host_main.cpp).
#pragma once
#include "Arduino.h"

class TwoWire {
 public:
  void begin() {}
  void setClock(uint32_t) {}
  void beginTransmission(uint8_t address);
  size_t write(uint8_t b);
  uint8_t endTransmission(bool stop = true);

 private:
  uint8_t address_ = 0;
  uint8_t buf_[32] = {};
  size_t len_ = 0;
  bool overrun_ = false;
};

extern TwoWire Wire;
