// The DAC board firmware as one host translation unit: the sketch itself, unchanged, after the
// Arduino header the Arduino IDE would add in front of it.
#include <Arduino.h>

#include "dac_board.ino"
