from chock.cli import main

main()
