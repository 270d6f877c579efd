#!/bin/sh
# Prints the classpath for compiling and running code against the generated Java
# stubs with Debian's grpc-java 1.41 jars (scripts/install_stub_toolchains.sh
# installs them):
#   CP=$(sdk_stubs/java/classpath.sh)
#   javac -d build -cp "$CP" $(find sdk_stubs/java/gen MyAgent.java -name '*.java')
#   java -cp "build:$CP" MyAgent
# For TLS, see tls-native.sh.
JARS="grpc-api grpc-context grpc-core grpc-netty grpc-protobuf grpc-protobuf-lite grpc-stub
  protobuf guava error_prone_annotations perfmark-api gson geronimo-annotation-1.3-spec
  netty-buffer netty-codec netty-codec-http netty-codec-http2 netty-codec-socks netty-common
  netty-handler netty-handler-proxy netty-resolver netty-transport netty-transport-native-unix-common
  netty-tcnative"
CP=""
for jar in $JARS; do
  path="${JAVA_LIB_DIR:-/usr/share/java}/$jar.jar"
  [ -f "$path" ] || { echo "classpath.sh: missing $path" >&2; exit 1; }
  CP="${CP:+$CP:}$path"
done
echo "$CP"
