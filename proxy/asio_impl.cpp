// The one translation unit that compiles Asio, Asio.SSL and Beast (separate compilation):
// every other file instantiates only what it uses, which keeps rebuilds to seconds.
#include <boost/asio/impl/src.hpp>
#include <boost/asio/ssl/impl/src.hpp>
#include <boost/beast/src.hpp>
