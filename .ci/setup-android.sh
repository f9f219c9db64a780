#!/bin/sh
# Tools the Android tests need besides the Python environment (tests/test_android.py):
#   qemu-user-static  runs the static aarch64/armv7 test runner built from the kernels
#   a JDK (17)        javac for the Java API (--release 8), jni.h for the JNI glue,
#                     java for the host-JVM test
# No Android NDK or SDK: zig (PyPI `ziglang`) compiles and links everything.
# Idempotent: installs only what is missing. Called by .ci/run.
set -eu

missing=""
command -v qemu-aarch64-static >/dev/null 2>&1 && command -v qemu-arm-static >/dev/null 2>&1 \
  || missing="$missing qemu-user-static"
if ! command -v javac >/dev/null 2>&1 && [ -z "${JAVA_HOME:-}" ]; then
  missing="$missing openjdk-17-jdk-headless"
fi

if [ -n "$missing" ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  echo "setup-android: installing$missing"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends $missing
fi

qemu-aarch64-static --version | head -n 1
qemu-arm-static --version | head -n 1
"${JAVA_HOME:+$JAVA_HOME/bin/}javac" -version
